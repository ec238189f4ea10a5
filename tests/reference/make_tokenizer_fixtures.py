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

  python3 tests/reference/make_tokenizer_fixtures.py [OUT_DIR]
"""
import json
import os
import random
import sys

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


def main():
    root = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "fixtures", "tokenizer")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for text in CORPUS:
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    for kind in ("qwen2", "llama3"):
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
