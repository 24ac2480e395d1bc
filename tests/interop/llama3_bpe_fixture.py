#!/usr/bin/env python3
"""A Llama 3-shaped byte-level BPE built with Hugging Face `tokenizers`, and the
texts it is judged on. Meta's own tokenizer.json is not reachable here, so this
is the next best thing: the same pre-tokenizer (Llama 3's Split regex, then
ByteLevel), the same model settings (BPE, ignore_merges true, no normalizer),
Llama 3's 256 special tokens at ids 128000..128255 (so the vocabulary size is
128256, as a Llama 3 model's), and its post-processor (<|begin_of_text|>
before each sequence) -- trained on a small multilingual corpus.

    llama3_bpe_fixture.py --out tokenizer.json [--vocab N] [--expected FILE]

writes the tokenizer and, with --expected, a JSON list of {"text", "ids"}
(ids from `tokenizers`, bos included) over texts(): the golden file of
ftrain's C++ unit test (tests/unit/data/fixtures/), regenerated with

    .venv-interop/bin/python tests/interop/llama3_bpe_fixture.py --vocab 600 \\
        --out tests/unit/data/fixtures/llama3_style_tokenizer.json \\
        --expected tests/unit/data/fixtures/llama3_style_expected.json
"""
import argparse
import json
import random

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
FIRST_SPECIAL = 128000


def llama3_special_tokens():
    """Meta's order and names (llama-models' llama3/tokenizer.py: Llama 3.1 and later; 3.0 called
    128004/5/8/10/11 reserved tokens)."""
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>", "<|image|>"]
    names += [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(names))]
    return names


def corpus():
    """Training text: several scripts, code, numbers, contractions, emoji, whitespace."""
    base = [
        "The quick brown fox jumps over the lazy dog. It's what they'd've said, isn't it? We'll see; you're right.",
        "Don't stop: I'M SURE HE'S THERE, THEY'RE WAITING and WE'VE GOT IT. She'd know, I'd think.",
        "def train(model, steps=1000):\n    for step in range(steps):\n        loss = model(batch)\n        loss.backward()\n",
        "if (x != nullptr && y->size() > 0) { return std::max(a, b); } // 42 is the answer\n\t\treturn 0;\n",
        "Numbers: 3.14159, 2718281828, 1,000,000 and 2026-11-23 at 18:35:00; version 0.21.0, port 8080.",
        "日本語のテキストです。東京は大きな都市です。機械学習と自然言語処理。",
        "中文文本：我们正在训练一个模型。数据并行和分片。你好，世界！",
        "한국어 텍스트입니다. 안녕하세요, 세계!",
        "Русский текст: быстрая коричневая лиса прыгает через ленивую собаку.",
        "Ελληνικά: η γρήγορη καφέ αλεπού. Français : l'été, où ça ? Deutsch: Größe, Straße, Äpfel.",
        "العربية: مرحبا بالعالم. हिन्दी: नमस्ते दुनिया। ไทย: สวัสดีชาวโลก",
        "Emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ 🔥🔥🔥 and ✨ sparkles ✨",
        "Whitespace    runs\t\tand\n\n\nnewlines   \n  indented\r\n  lines        end   ",
        "Math: ∑ x² + ∫ f(x) dx ≤ ∞, α β γ; Ⅻ ½ ① ５６７",
    ]
    rng = random.Random(5)
    words = " ".join(base).split()
    lines = list(base)
    for _ in range(400):
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 20))))
    for _ in range(100):
        lines.append(str(rng.randint(0, 10 ** rng.randint(1, 15))) + rng.choice([" items", ",", ".", "%", " km"]))
    return lines


def build(vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    # Llama 3's layout: the special tokens after a gap, at 128000..128255, and
    # its post-processor. tokenizers gives an added token the id the model's
    # vocabulary has for it, else the next free one (Llama 3's BPE vocabulary
    # has 128000 entries, so its specials follow); a small vocabulary reaches
    # the same ids by listing the specials in model.vocab at those ids.
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = True
    for i, name in enumerate(llama3_special_tokens()):
        spec["model"]["vocab"][name] = FIRST_SPECIAL + i
    spec["added_tokens"] = [{"id": FIRST_SPECIAL + i, "content": name, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}
                            for i, name in enumerate(llama3_special_tokens())]
    spec["post_processor"] = {
        "type": "Sequence",
        "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [FIRST_SPECIAL],
                                                      "tokens": ["<|begin_of_text|>"]}}},
        ],
    }
    text = json.dumps(spec, ensure_ascii=False)
    loaded = Tokenizer.from_str(text)
    assert loaded.token_to_id("<|end_of_text|>") == FIRST_SPECIAL + 1
    assert loaded.encode("x<|end_of_text|>").ids[-1] == FIRST_SPECIAL + 1
    return loaded, spec


def texts(seed=11, n_random=300):
    """What ftrain must encode exactly as `tokenizers` does."""
    fixed = corpus()[:14] + [
        "a", " ", "  ", "\n", "x\n", " \n ", "\t \t", "\r\n\r\n", "     leading", "trailing     ",
        "a\u00a0b\u00a0\u00a0c", "line\u2028sep\u2029para", "nel\x85x \x85 y", "ideo\u3000space", "x\u180ey",
        "x \u3000\u3000 y", "a\u2003\u2003\nb", "end\u00a0\u00a0", "\u2028\u2028\u2028z", "p\u3000\u3000\u3000", "\u2003%\u2003!! a\u3000(b)",
        "HE'S I'LL YOU'D we'Re THEY'VE I'm it's don'ſ", "'s's'S 't", "o'clock rock'n'roll ''quoted'' '",
        "1 12 123 1234 12345 123456 1234567 12345678901234567890", "٣٤٥٦ ১২৩৪ ①②③ ²³ Ⅻ ５６７８",
        "e\u0301te\u0301 cafe\u0301 n\u0303 a\u0308\u0308", "👩🏽‍💻 1️⃣ #️⃣ 🏳️‍🌈 🫠", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 𐍈",
        "<|begin_of_text|>Hello<|eot_id|>", "x<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
        "<|reserved_special_token_100|><|reserved_special_token_10|><|python_tag|>", "<|begin_of_text|", "<|not_a_token|>",
        "    def f():\n        return {'a': [1, 2, 3]}  # comment\n\n\n",
        "!!!??? ... --- ***  ___ ~~~ ``` ''' \"\"\"",
        "ąćęłńóśźż ĄĆĘŁŃÓŚŹŻ ß ẞ ǅ ǈ",
        "Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ ＡＢＣ",
        "tab\tseparated\tvalues\t1\t22\t333",
        "a" * 300 + " " + "ab" * 150 + " " + " " * 200 + "z",
        "😀" * 50,
        "\n" * 20 + "x" + " \n" * 10,
    ]
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " \t\n\r\u00a0\u2003\u3000\x0b\x0c\x85\u2028",
        "'’\"!?.,;:-_()[]{}<>|/\\@#$%^&*+=~`",
        "日本語中文字한국어",
        "абвгдеёжзАБВГД",
        "αβγδεζηθ",
        "éèêëçàùîôœÆØÅ",
        "\u0301\u0308\u0303\u200d\ufe0f",
        "😀👍🏽🔥✨🇫🇷❤",
        "٣٤①²Ⅻ５",
        "sStTdDmMlLvVrReE'",
    ]
    out = list(fixed)
    for _ in range(n_random):
        k = rng.randint(1, 60)
        out.append("".join(rng.choice(rng.choice(pools)) for _ in range(k)))
    # Random code points from every plane's assigned ranges (Python's Unicode
    # database decides which are assigned; surrogates excluded).
    import unicodedata
    for _ in range(n_random // 3):
        chars = []
        while len(chars) < rng.randint(1, 30):
            cp = rng.choice([rng.randint(0x20, 0x2FFF), rng.randint(0x3000, 0xFFFD), rng.randint(0x10000, 0x1FFFF)])
            if 0xD800 <= cp <= 0xDFFF or unicodedata.category(chr(cp)) in ("Cn", "Cs", "Co"):
                continue
            chars.append(chr(cp))
        out.append("".join(chars))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=600)
    ap.add_argument("--expected")
    a = ap.parse_args()
    tok, spec = build(a.vocab)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, indent=1)
        f.write("\n")
    if a.expected:
        cases = [{"text": t, "ids": tok.encode(t).ids} for t in texts(n_random=60)]
        with open(a.expected, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=True, indent=None, separators=(",", ":"))
            f.write("\n")


if __name__ == "__main__":
    main()
