# Checks a trained export (tests/reference/trained_export.cc wrote OUT/model and
# OUT/ours.safetensors): transformers' from_pretrained loads it with no missing or
# unexpected weights, and its forward pass gives our logits within the tolerance below.
#   python3 tests/reference/check_trained_export.py OUT
# Prints one line per check and "ALL OK" or "FAILURES"; exit code 0 only on ALL OK.
import sys
import torch
import transformers
from safetensors import safe_open
from transformers import AutoModelForCausalLM

# fp32 on both sides; the two forwards differ only in summation order and kernels.
ABS_TOL = 1e-4   # max |ours - theirs| <= ABS_TOL * max(1, max |logit|)

out = sys.argv[1]
print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
ok = True
m, info = AutoModelForCausalLM.from_pretrained(out + "/model", dtype=torch.float32,
                                               attn_implementation="eager", output_loading_info=True)
m.eval()
info = {k: v for k, v in info.items() if v}
print("from_pretrained", type(m).__name__, "loading info", info or "clean", flush=True)
if info:
    ok = False
with safe_open(out + "/ours.safetensors", "pt") as f:
    ids = f.get_tensor("input_ids").long()
    ours = f.get_tensor("logits")
    meta = f.metadata()
with torch.no_grad():
    theirs = m(input_ids=ids).logits.float()
scale = max(1.0, ours.abs().max().item())
diff = (theirs - ours).abs().max().item()
same_argmax = (theirs.argmax(-1) == ours.argmax(-1)).float().mean().item()
print(f"model {meta.get('model')} steps {meta.get('steps')} digest {meta.get('weights_digest')}: "
      f"logits {tuple(ours.shape)} max|diff| {diff:.3g} (tolerance {ABS_TOL * scale:.3g}), "
      f"argmax agreement {same_argmax:.4f}", flush=True)
if not torch.isfinite(theirs).all() or diff > ABS_TOL * scale:
    ok = False
print("ALL OK" if ok else "FAILURES")
sys.exit(0 if ok else 1)
