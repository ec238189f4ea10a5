#!/usr/bin/env python3
"""The baselines of tests/bench/RESULTS.md, run beside step_bench on the GPU host.

  plain: what users run when the model fits: PyTorch + transformers, fp32 master
         weights on the GPU, bf16 autocast, SDPA, activation checkpointing, fused AdamW
         on the GPU, clip_grad_norm_(1.0).
  fsdp2_offload: what users run when it does not: FSDP2 fully_shard per decoder layer
         with CPUOffloadPolicy(pin_memory=True), bf16 params / fp32 reduce, activation
         checkpointing, fused CPU AdamW.
  fsdp2: the same without offload: parameters, gradients and AdamW state sharded over
         the GPUs (fused AdamW on the GPU).
The FSDP2 modes run on one GPU as they are, or on W under torchrun:
  torchrun --standalone --nproc_per_node W tests/bench/torch_baseline.py --mode fsdp2 ...
where --batch is the global batch (each rank runs batch / W sequences) and rank 0 prints
the global tokens/s.

Same model shapes as slidedp's presets (random weights), same tokens per step.
  python3 tests/bench/torch_baseline.py --mode plain --shape qwen2.5-3b --batch 4 --seq 4096
Prints one line per step and a summary line "RESULT mode shape batch seq s/step tok/s peak_GB"
(or "RESULT ... OOM").
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F
import transformers

SHAPES = {
    # Qwen2-style 3.09B: 36 layers, hidden 2048, FFN 11008, 16 heads, 2 KV heads, vocab 151936.
    "qwen2.5-3b": dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008,
                       num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
                       tie_word_embeddings=True),
    "qwen2.5-7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                       num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                       tie_word_embeddings=False),
    # Qwen3-style 14.77B (issue 22's capacity run): q/k norms, head_dim 128.
    "qwen3-14b": dict(vocab_size=151936, hidden_size=5120, intermediate_size=17408,
                      num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=8,
                      head_dim=128, tie_word_embeddings=False),
}
CONFIGS = {"qwen3-14b": "Qwen3Config"}


def build(shape, dtype, device, seq):
    config_class = getattr(transformers, CONFIGS.get(shape, "Qwen2Config"))
    cfg = config_class(**SHAPES[shape], max_position_embeddings=max(32768, seq + 1),
                       rope_theta=1000000.0, rms_norm_eps=1e-6, use_cache=False)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa",
                                                              torch_dtype=dtype)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return cfg, model.train()


def loss_of(model, batch, autocast):
    inp, tgt = batch[:, :-1], batch[:, 1:]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=inp).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1))


T0 = time.perf_counter()


def phase(what):
    """A progress line, so that a run that dies or is killed shows how far it got."""
    print(f"[{time.perf_counter() - T0:7.1f} s] {what}", flush=True)


def run(args):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    world, rank = 1, 0
    if args.mode == "plain":
        cfg, model = build(args.shape, torch.float32, dev, args.seq)
        phase(f"model built on the GPU ({torch.cuda.memory_allocated() / 1e9:.1f} GB)")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), fused=True)
        autocast = True
    else:
        import torch.distributed as dist
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        torch.manual_seed(rank)
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        dist.init_process_group("nccl", rank=rank, world_size=world)
        if args.batch % world:
            raise SystemExit(f"--batch {args.batch} does not split over {world} ranks")
        cfg, model = build(args.shape, torch.float32, torch.device("meta"), args.seq)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        off = CPUOffloadPolicy(pin_memory=True) if args.mode == "fsdp2_offload" else None
        kw = dict(mp_policy=mp) if off is None else dict(mp_policy=mp, offload_policy=off)
        for layer in model.model.layers:
            fully_shard(layer, **kw)
        fully_shard(model, **kw)
        model.to_empty(device="cpu" if off is not None else dev)
        phase("parameters allocated" + (" on the host" if off is not None else ""))
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, 0.02)
        phase("parameters initialized")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), fused=True)
        autocast = False
    V = cfg.vocab_size
    times = []
    peak = 0.0
    try:
        for step in range(args.steps):
            batch = torch.randint(0, V, (args.batch // world, args.seq + 1), device=dev)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = loss_of(model, batch, autocast)
            if step == 0:
                phase("first forward done")
            loss.backward()
            if step == 0:
                phase("first backward done")
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step == 0:
                phase("first optimizer step done")
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            peak = max(peak, torch.cuda.max_memory_allocated() / 1e9)
            if rank == 0:
                print(f"{args.mode} {args.shape} x{world} step {step + 1}: loss {loss.item():.4f} {dt:.3f} s "
                      f"{args.batch * args.seq / dt:.0f} tok/s", flush=True)
            if step > 0:
                times.append(dt)
    except torch.OutOfMemoryError as e:
        phase(f"out of memory: {str(e).splitlines()[0][:300]}")
        print(f"RESULT {args.mode} {args.shape} x{world} {args.batch} {args.seq} OOM (rank {rank})", flush=True)
        return
    if not times:  # --steps 1: the first step is the figure
        times = [dt]
    t = sum(times) / len(times)
    if rank == 0:
        print(f"RESULT {args.mode} {args.shape} x{world} {args.batch} {args.seq} {t:.3f} s/step "
              f"{args.batch * args.seq / t:.0f} tok/s peak {peak:.1f} GB", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["plain", "fsdp2", "fsdp2_offload"], default="plain")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-3b")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=4)
    run(ap.parse_args())


if __name__ == "__main__":
    main()
