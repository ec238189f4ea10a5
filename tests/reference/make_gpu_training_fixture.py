#!/usr/bin/env python3
"""Makes the fixture of tests/runtime/engine/cuda_training_test.cc on the GPU host: 5
steps of plain PyTorch training of a small Qwen2 model, the way users train when the
model fits.

fp32 master weights on the GPU, bf16 autocast, SDPA attention, the loss as the mean
token cross-entropy (computed in fp32), clip_grad_norm_(1.0), torch.optim.AdamW with
weight decay on the matrices only, constant learning rate. The same 5 steps are also
run without autocast (all fp32), so that the test can state its tolerance in units of
what bf16 itself changes.

Writes into OUT (default tests/reference/fixtures/gpu_training):
  model/            the initial weights as a Hugging Face directory (fp32 safetensors)
  tokens.bin        the token stream, raw uint16 (nanoGPT format): step k row i is the
                    window starting at token (4k + i) * 128, 129 tokens long
  reference.safetensors  final weights of both runs ("bf16.NAME", "fp32.NAME", HF names),
                    per-step losses and gradient norms ("bf16.loss", "fp32.grad_norm", ...)
  settings.json     the training settings the test must use

  python3 tests/reference/make_gpu_training_fixture.py [OUT]
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file

SEQ, ROWS, STEPS = 128, 4, 5
LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0


def make_model(seed):
    cfg = transformers.Qwen2Config(
        vocab_size=384, hidden_size=96, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model = model.float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn_like(p))
    return cfg, model


def tokens(vocab, n, seed):
    # A learnable stream: runs of an arithmetic pattern with random restarts.
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n, dtype=torch.int64)
    t = 0
    while t < n:
        start = int(torch.randint(0, vocab, (1,), generator=g))
        step = int(torch.randint(1, 7, (1,), generator=g))
        run = int(torch.randint(4, 40, (1,), generator=g))
        for k in range(min(run, n - t)):
            out[t + k] = (start + k * step) % vocab
        t += run
    return out


def train(model, stream, autocast):
    model = model.cuda().train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False, fused=False)
    losses, norms = [], []
    for k in range(STEPS):
        rows = [stream[(ROWS * k + i) * SEQ:(ROWS * k + i) * SEQ + SEQ + 1] for i in range(ROWS)]
        batch = torch.stack(rows).cuda()
        inp, tgt = batch[:, :-1], batch[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=inp, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
        norms.append(float(norm))
    return model, losses, norms


def main():
    root = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "fixtures", "gpu_training")
    os.makedirs(out, exist_ok=True)
    cfg, model = make_model(seed=11)
    model.save_pretrained(os.path.join(out, "model"), safe_serialization=True)
    stream = tokens(cfg.vocab_size, ROWS * STEPS * SEQ + 1, seed=5)
    stream.to(torch.int16 if cfg.vocab_size < 32768 else torch.int32).numpy().tofile(
        os.path.join(out, "tokens.bin"))
    ref = {}
    for tag, autocast in (("bf16", True), ("fp32", False)):
        _, m = make_model(seed=11)
        m, losses, norms = train(m, stream, autocast)
        seen = set()
        for name, p in m.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            ref[f"{tag}.{name}"] = p.detach().float().cpu().contiguous()
        ref[f"{tag}.loss"] = torch.tensor(losses, dtype=torch.float32)
        ref[f"{tag}.grad_norm"] = torch.tensor(norms, dtype=torch.float32)
        print(tag, "losses", [round(x, 5) for x in losses], "norms", [round(x, 4) for x in norms])
    save_file(ref, os.path.join(out, "reference.safetensors"))
    with open(os.path.join(out, "settings.json"), "w") as f:
        json.dump({"seq_len": SEQ, "rows_per_step": ROWS, "steps": STEPS, "lr": LR,
                   "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS, "weight_decay": WD,
                   "max_grad_norm": CLIP, "schedule": "constant",
                   "torch": torch.__version__, "transformers": transformers.__version__,
                   "gpu": torch.cuda.get_device_name(0)}, f, indent=1)
    print("->", out)


if __name__ == "__main__":
    main()
