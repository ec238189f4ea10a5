# Checks a trained export (tests/reference/trained_export.cc wrote OUT/model and
# OUT/ours.safetensors): transformers' from_pretrained loads it with no missing or
# unexpected weights, and its forward pass gives our logits within the tolerance below;
# for a model trained with a tokenizer, the export's tokenizer loads and generate()
# continues a prompt with our greedy tokens.
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
    keys = set(f.keys())
    greedy_tensors = {k: f.get_tensor(k) for k in ("prompt_ids", "greedy") if k in keys}
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
if "greedy" in keys:
    # A model with a tokenizer (stories260K): the export's own tokenizer files load in
    # transformers and give our prompt ids, and generate() continues the prompt greedily
    # with our tokens (up to its EOS, where it stops and we do not).
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(out + "/model")
    prompt = greedy_tensors["prompt_ids"].long()
    ours_greedy = greedy_tensors["greedy"].long()
    theirs_prompt = tok("Once upon a time", return_tensors="pt").input_ids[0]
    same_prompt = theirs_prompt.tolist() == prompt.tolist()
    with torch.no_grad():
        gen = m.generate(prompt[None], max_new_tokens=len(ours_greedy) - len(prompt), do_sample=False)[0]
    n = len(gen)
    eos = m.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, (list, tuple)) else [eos])
    stopped = n < len(ours_greedy) and gen[-1].item() in eos
    same = gen.tolist() == ours_greedy[:n].tolist() and (n == len(ours_greedy) or stopped)
    print(f"tokenizer {type(tok).__name__}: prompt ids {'equal' if same_prompt else 'DIFFER'} "
          f"{theirs_prompt.tolist()} vs ours {prompt.tolist()}", flush=True)
    print(f"generate: {n - len(prompt)} new tokens {'equal ours' if same else 'DIFFER from ours'}"
          f"{' (stopped at EOS)' if stopped else ''}: {tok.decode(gen, skip_special_tokens=True)!r}", flush=True)
    if not same_prompt or not same:
        print("ours:", ours_greedy.tolist(), "\ntheirs:", gen.tolist())
        ok = False
print("ALL OK" if ok else "FAILURES")
sys.exit(0 if ok else 1)
