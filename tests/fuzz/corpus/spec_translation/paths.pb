
tiny
jsonl/data/a.jsonlHR	ü©ñÒMbP?"cosineb	/out/ckpt‚	replicate