#!/usr/bin/env python3
"""gpu_sanity.py: does this GPU compute right, before anything of ours runs on it?
PyTorch alone (no slidedp code): bf16 GEMMs against fp32 GEMMs of the same operands, and
every SDPA backend's causal attention, forward and gradients, against the math backend.
Exits 1 (and says which) where an error passes its bound: then our tests' failures on
this machine say nothing about our code. Prints the GPU's ECC counters' summary line.
Usage: python3 tests/bench/gpu_sanity.py
"""
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def main():
    bad = []
    torch.manual_seed(0)
    for _ in range(3):
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        e = rel(a @ b, a.float() @ b.float())
        print(f"bf16 GEMM 4096^3 vs fp32: rel err {e:.2e}")
        if e > 1e-2:
            bad.append("GEMM")
    q, k, v = (torch.randn(2, 16, 512, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    outs = {}
    for be in (SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel(be):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                outs[be.name] = (o, torch.autograd.grad(o.float().square().sum(), (q, k, v)))
        except RuntimeError as err:
            print(f"{be.name}: not run ({str(err).splitlines()[0][:80]})")
    ref = outs.pop("MATH")
    for name, (o, grads) in outs.items():
        errs = [rel(o, ref[0])] + [rel(g, r) for g, r in zip(grads, ref[1])]
        print(f"SDPA {name} vs MATH: out {errs[0]:.2e}, dq dk dv {errs[1]:.2e} {errs[2]:.2e} {errs[3]:.2e}")
        if max(errs) > 3e-2:
            bad.append(name)
    torch.cuda.synchronize()
    ecc = subprocess.run(["nvidia-smi", "--query-gpu=name,ecc.errors.uncorrected.volatile.total,"
                          "ecc.errors.corrected.volatile.total,remapped_rows.pending", "--format=csv,noheader"],
                         capture_output=True, text=True)
    print("GPU, ECC uncorrected, corrected, rows pending remap:", ecc.stdout.strip() or ecc.stderr.strip())
    if bad:
        print("GPU SANITY FAILED:", ", ".join(bad))
        return 1
    print("GPU sanity ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
