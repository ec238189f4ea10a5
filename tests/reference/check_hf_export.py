# Checks that transformers loads the folders written by slidedp (tests/reference/export_fixtures.cc):
#   build/tests/export_fixtures tests/reference/fixtures OUT && python3 tests/reference/check_hf_export.py OUT
import os, torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM
from safetensors.torch import load_file
print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
import sys
base, fx = sys.argv[1], "tests/reference/fixtures"  # base: export_fixtures OUT_DIR
ok = True
def load(d):
    m, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                                   output_loading_info=True)
    return m.eval(), {k: v for k, v in info.items() if v}
for fam in ["llama", "qwen2", "qwen3"]:
    ref, _ = load(os.path.join(fx, fam))
    refd = ref.state_dict()
    r = load_file(os.path.join(fx, fam, "reference.safetensors"))
    ids = r["input_ids"].long()
    with torch.no_grad():
        ref_logits = ref(input_ids=ids).logits
    for var in ["f32", "bf16"]:
        m, info = load(os.path.join(base, f"{fam}_{var}"))
        sd = m.state_dict()
        maxdiff = max((sd[k] - (v if var == "f32" else v.bfloat16().float())).abs().max().item()
                      for k, v in refd.items())
        with torch.no_grad():
            ld = (m(input_ids=ids).logits - ref_logits).abs().max().item()
        same = all(getattr(m.config, a) == getattr(ref.config, a) for a in
                   ["head_dim", "num_key_value_heads", "tie_word_embeddings", "rms_norm_eps", "rope_parameters",
                    "vocab_size", "intermediate_size"] if hasattr(ref.config, a))
        print(fam, var, "info", info, "param maxdiff", maxdiff, "logit maxdiff", ld, "config same", same,
              m.config.rope_parameters, flush=True)
        if info or maxdiff != 0 or not same or (var == "f32" and ld > 1e-5):
            ok = False
for name in ["tiny", "small"]:
    m, info = load(os.path.join(base, name))
    with torch.no_grad():
        out = m(input_ids=torch.randint(0, m.config.vocab_size, (2, 16))).logits
    tied = m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    print(name, "info", info, "finite", bool(torch.isfinite(out).all()), "tied", tied, flush=True)
    if info or not torch.isfinite(out).all() or tied != (name == "tiny"):
        ok = False
want = {"qwen2.5-0.5b": 494032768, "qwen2.5-1.5b": 1543714304, "qwen2.5-3b": 3085938688,
        "qwen2.5-7b": 7615616512, "qwen3-8b": 8190735360, "qwen3-14b": 14768307200,
        "llama-3.1-8b": 8030261248}
for name in sorted(os.listdir(base)):
    if not name.startswith("cfg_"):
        continue
    c = AutoConfig.from_pretrained(os.path.join(base, name))
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(c)
    n = sum(p.numel() for p in m.parameters())
    p = name[4:]
    print(p, type(m).__name__, "params", n, "head_dim", c.head_dim, c.rope_parameters, flush=True)
    if p in want and n != want[p]:
        ok = False
print("ALL OK" if ok else "FAILURES")
