#!/usr/bin/env python3
"""The Hugging Face tokenizers package on the corpus that tokenize_bench reads.

  tokenize_baseline.py make-corpus OUT.jsonl [--mb 32] [--seed 1]
      writes JSON lines {"text": ...}: documents made of the lines of
      tests/reference/fixtures/tokenizer/corpus.jsonl (several languages, code, emoji,
      whitespace runs), shuffled and joined with numbers and words, seeded.
  tokenize_baseline.py run TOKENIZER.json CORPUS.jsonl [--threads 2] [--repeat 3]
      encodes every document (no special tokens) with Tokenizer.encode_batch on
      `threads` Rayon threads and prints the same line as tokenize_bench: documents, MB,
      ids, FNV-1a checksum of the ids, best-of-`repeat` MB/s.
Set the thread count before tokenizers is imported (RAYON_NUM_THREADS), as this does.
"""
import argparse
import json
import os
import random
import sys
import time


def make_corpus(out, mb, seed):
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(here, "..", "reference", "fixtures", "tokenizer", "corpus.jsonl")
    lines = [json.loads(l)["text"] for l in open(src, encoding="utf-8") if l.strip()]
    words = " ".join(lines).split()
    rng = random.Random(seed)
    target = int(mb * 1e6)
    written = 0
    with open(out, "w", encoding="utf-8") as f:
        while written < target:
            parts = []
            for _ in range(rng.randint(4, 24)):
                r = rng.random()
                if r < 0.5:
                    parts.append(rng.choice(lines))
                elif r < 0.8:
                    parts.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))))
                else:
                    parts.append(f"{rng.randint(0, 10**9)} {rng.random():.6f}")
            doc = rng.choice(["\n", " ", "\n\n", "  "]).join(parts)
            f.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
            written += len(doc.encode("utf-8"))
    print(f"make-corpus: {out}: {written / 1e6:.2f} MB")


def fnv1a(h, ids):
    for i in ids:
        u = i & 0xFFFFFFFF
        for b in range(4):
            h ^= (u >> (8 * b)) & 0xFF
            h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def run(tok_path, corpus, threads, repeat):
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    import tokenizers  # after the thread count is set

    if os.path.isdir(tok_path):
        tok_path = os.path.join(tok_path, "tokenizer.json")
    tok = tokenizers.Tokenizer.from_file(tok_path)
    docs = [json.loads(l)["text"] for l in open(corpus, encoding="utf-8") if l.strip()]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    best = float("inf")
    encs = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        encs = tok.encode_batch(docs, add_special_tokens=False)
        best = min(best, time.perf_counter() - t0)
    h = 1469598103934665603
    n = 0
    for e in encs:
        h = fnv1a(h, e.ids)
        n += len(e.ids)
    print(f"tokenizers {tokenizers.__version__}: {len(docs)} documents, {nbytes / 1e6:.2f} MB, {n} ids, "
          f"checksum {h:016x}, threads {threads}, best of {repeat}: {best:.3f} s, {nbytes / 1e6 / best:.2f} MB/s")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-corpus")
    m.add_argument("out")
    m.add_argument("--mb", type=float, default=32)
    m.add_argument("--seed", type=int, default=1)
    r = sub.add_parser("run")
    r.add_argument("tokenizer")
    r.add_argument("corpus")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    if a.cmd == "make-corpus":
        make_corpus(a.out, a.mb, a.seed)
    else:
        run(a.tokenizer, a.corpus, a.threads, a.repeat)


if __name__ == "__main__":
    sys.exit(main())
