#!/usr/bin/env python3
"""Builds the Hugging Face reference fixtures for tests/runtime/model/hf_reference_test.cc.

Run on a machine with PyTorch and transformers (the GPU host has both):
    python3 tests/reference/make_fixtures.py --out tests/reference/fixtures

For each family (Llama, Qwen2, Qwen3, Mistral) it makes a tiny random model with transformers,
saves it as a Hugging Face directory, and records, for a fixed batch, the logits, the
loss and every parameter's gradient, computed in float32 on the CPU with the eager
attention path. Norm weights and biases are randomized so that they matter. Saved as
`reference.safetensors` in each model directory (token ids stored as F32, exact for
these small vocabularies).
"""
import argparse
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file


def configs():
    common = dict(vocab_size=96, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-6)
    return {
        # Llama with Llama-3.1 rope scaling, attention and MLP biases, untied head.
        "llama": transformers.LlamaConfig(
            **common, rope_theta=500000.0, attention_bias=True, mlp_bias=True,
            tie_word_embeddings=False,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8}),
        # Qwen2: q/k/v biases, tied embeddings; saved in shards.
        "qwen2": transformers.Qwen2Config(**common, rope_theta=1000000.0,
                                          tie_word_embeddings=True),
        # Qwen3: q/k norms, head_dim (32) different from hidden/heads (16).
        "qwen3": transformers.Qwen3Config(**common, head_dim=32, rope_theta=1000000.0,
                                          tie_word_embeddings=False, attention_bias=False),
        # Mistral: the Llama layout without biases, with Mistral 7B v0.1's sliding window
        # (longer than the batch's sequences, as the engine requires).
        "mistral": transformers.MistralConfig(**common, rope_theta=10000.0, sliding_window=4096,
                                              tie_word_embeddings=False),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--families", default="llama,qwen2,qwen3,mistral",
                    help="comma-separated subset, e.g. mistral")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for family, cfg in configs().items():
        if family not in args.families.split(","):
            continue
        torch.manual_seed(args.seed)
        cfg._attn_implementation = "eager"
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
        model = model.float().train()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                elif name.endswith(".bias"):
                    p.copy_(0.05 * torch.randn_like(p))
        B, T = 2, 24
        ids = torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(args.seed))
        labels = ids.clone()
        labels[1, 5] = -100  # one ignored target
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
        d = os.path.join(args.out, family)
        shard = "60KB" if family == "qwen2" else "100GB"
        model.save_pretrained(d, safe_serialization=True, max_shard_size=shard)
        ref = {
            "input_ids": ids.float(),
            "labels": labels.float(),
            "logits": out.logits.detach().float().contiguous(),
            "loss": out.loss.detach().reshape(1).float(),
        }
        seen = set()
        for name, p in model.named_parameters():
            if p.grad is None or id(p) in seen:
                continue
            seen.add(id(p))
            ref["grad." + name] = p.grad.detach().float().contiguous()
        save_file(ref, os.path.join(d, "reference.safetensors"),
                  metadata={"transformers": transformers.__version__, "torch": torch.__version__})
        print(f"{family}: loss {out.loss.item():.6f}, {len(seen)} parameter tensors, -> {d}")
        print(json.dumps(sorted(os.listdir(d))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
