#!/usr/bin/env python3
"""Makes the transformers reference for tests/runtime/engine/stories260k_test.cc.

Loads ../shared/models/stories260K (a real trained Llama, README there) with transformers
and its tokenizer.json with the tokenizers package, encodes the fixed story with the BOS
template, and saves the ids, the fp32 eager logits and the mean next-token loss as
tests/reference/fixtures/stories260k/reference.safetensors. Also greedy-decodes 40 tokens
from "Once upon a time" (with <s>), saved as "greedy" (prompt and continuation) and printed.

  python3 tests/reference/make_stories260k_fixture.py MODEL_DIR OUT_DIR

The GPU host has neither the model nor network: carry a copy of the model directory in
an ignored path of the checkout (e.g. build/stories260K) with the run tool's `carry`, and
run  python3 tests/reference/make_stories260k_fixture.py build/stories260K "$OUT"
"""
import os
import sys

import tokenizers
import torch
import transformers
from safetensors.torch import save_file

STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the "
         "park. One day, she saw a big red ball under a tree. She ran to get it and smiled.")


def main():
    model_dir, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    tok = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    ids = tok.encode(STORY, add_special_tokens=True).ids
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, torch_dtype=torch.float32, attn_implementation="eager").eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        o = model(input_ids=x, labels=x)
        prompt = torch.tensor([tok.encode("Once upon a time", add_special_tokens=True).ids])
        greedy = model.generate(prompt, max_new_tokens=40, do_sample=False)
    save_file({"input_ids": x.float(), "logits": o.logits.float().contiguous(),
               "loss": o.loss.reshape(1).float(), "greedy": greedy[0].float().contiguous()},
              os.path.join(out, "reference.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                        "tokenizers": tokenizers.__version__})
    print("ids", len(ids), "loss", o.loss.item())
    print("greedy", greedy[0].tolist())
    print("text", tok.decode(greedy[0].tolist()))


if __name__ == "__main__":
    main()
