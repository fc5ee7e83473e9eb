#!/usr/bin/env python3
"""parity.py writes the ground truth that `go test ./tokenizer` holds the WordPiece and
Unigram tokenizers to: tokenizer/testdata/parity-wordpiece.json and
parity-unigram.json, each {"source", "normalizer_sha256", "entries": [{"text", "ids"}]},
with the ids Hugging Face's `tokenizers` (the PyPI package, pinned in
requirements.txt) gives for 250+ hard strings, without special tokens and with
split_special_tokens=True (control-token literals in text are text).

References:
  - WordPiece: the real tokenizer.json of all-MiniLM-L6-v2 (scripts/fetch-encoders.sh),
    with its truncation and padding turned off.
  - Unigram: XLM-R's vocabulary as llama.cpp stores it (ggml-vocab-nomic-bert-moe.gguf,
    the vocabulary of nomic-embed-text-v2-moe, which is XLM-R's), loaded into HF's own
    Unigram, Precompiled, Replace and Metaspace exactly as transformers'
    XLMRobertaConverter writes XLM-R's tokenizer.json. HF's Unigram would also produce
    control tokens from their literal text ("<s>" is id 0 even with
    split_special_tokens); the server never does (package tokenizer's documentation),
    so the reference renames the control and unknown pieces to strings text cannot hold.
    Entries where plain HF differs carry its ids as "hf_raw".

normalizer_sha256 is a digest of what the normaliser makes of every code point alone;
the Go tests compute the same over all of Unicode.

Usage (repository root, venv of tools/hf-tokenizers/requirements.txt):
    python tools/hf-tokenizers/parity.py          # rewrite both files
    python tools/hf-tokenizers/parity.py --check  # fail if either differs from HF now
"""
import argparse
import hashlib
import json
import os
import random
import sys

import numpy as np
import tokenizers
from gguf import GGUFReader
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MINILM = os.path.join(ROOT, ".cache", "minilm", "tokenizer.json")
XLMR = os.path.join(ROOT, ".cache", "xlmr", "ggml-vocab-nomic-bert-moe.gguf")
OUT_WP = os.path.join(ROOT, "tokenizer", "testdata", "parity-wordpiece.json")
OUT_UG = os.path.join(ROOT, "tokenizer", "testdata", "parity-unigram.json")
MINILM_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
XLMR_SHA256 = "90a6746926454784a98389ad36a36d89bc9cfc81db9cb0f33c941bcc959fe5f9"


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def corpus(name):
    with open(os.path.join(ROOT, "testdata", "corpus", name), encoding="utf-8") as f:
        return f.read()


HAND = [
    # English and case
    "hello world", "Hello, World!", "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX", "a", "A", "", " ", "I'm", "don't", "rock 'n' roll",
    "Embeddings map text to vectors; similar meanings land close together.",
    "unaffable", "unbelievably", "Supercalifragilisticexpialidocious", "tokenization",
    # accents, ligatures, compatibility forms, combining marks
    "café", "cafe\u0301", "naïve résumé", "Crème Brûlée", "ÅÉÎÕÜ åéîõü", "Ångström",
    "ﬁ ﬂ ﬀ ﬃ", "Ａｂｃ１２３", "ｶﾀｶﾅ ｶﾞ", "Ａ\u0301", "e\u0301\u0301", "\u0301 leading mark",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334", "İstanbul", "ΣΊΣΥΦΟΣ", "Straße STRASSE",
    "ǅemal", "ŉ", "ß", "ẞ", "Ǆ", "ᾈ", "Ⅻ", "①②③", "㍿", "™", "½", "x²", "Ω Ω", "K K", "Å Å",
    "ā ē ī ō ū", "Việt Nam", "Đà Nẵng", "Łódź", "Ørsted", "Þór", "ĳ", "ĸ", "ſ",
    # CJK, Japanese, Korean
    "中文", "你好，世界！", "我爱自然语言处理", "日本語のテキスト", "カタカナとひらがな", "한국어 텍스트",
    "안녕하세요", "English中文混合mixed文本", "中" * 150, "𠀀𠀁 extension B", "〇 々 〆", "㐀㐁",
    "豈 更", "⺀ radical", "。，、「」『』", "ｈｅｌｌｏ　ｗｏｒｌｄ",
    # other scripts
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "क्षत्रिय", "สวัสดีครับ", "Привет, мир!",
    "Γειά σου Κόσμε", "ᏣᎳᎩ", "ሰላም", "გამარჯობა", "Բարեւ", "ᠮᠣᠩᠭᠣᠯ", "བོད་ཡིག", "ಕನ್ನಡ", "தமிழ்",
    "ગુજરાતી", "ਪੰਜਾਬੀ", "বাংলা", "سلام دنیا", "اردو", "ܫܠܡܐ", "ދިވެހި", "ꦗꦮ", "𐌰𐌱𐌲 gothic",
    "العربية مع English و 123", "עברית עם ניקוד: שָׁלוֹם",
    # emoji
    "😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🇺🇸🇯🇵", "❤️", "🧑🏿\u200d🚀",
    "emoji😀inside", "1️⃣ #️⃣", "😀" * 40, "🥰🫠🪿", "I ❤️ NY", "☕️ & 🍰",
    # whitespace and control characters
    "  leading", "trailing  ", "  both  ", "many     spaces     between", "a\tb", "a\nb",
    "a\r\nb", "\t\t", "\n\n\n", "x\u00a0y", "x\u3000y", "a\u2028b", "a\u2029b", "a\u0085b",
    "\u000b\u000c", "a\u200bb", "zero\u200bwidth\u200cnon\u200djoiner", "\ufeffBOM", "soft\u00adhyphen",
    "\u0000", "a\u0000b", "\u0001\u0002\u0003", "\u007f", "\u009f", "a\ufffdb", "\ufffd",
    "\ue000 private use \U000f0000", "\u200e\u200f bidi", "\u202a\u202e embedding", "\u2066isolate\u2069",
    "tab\there", " " * 100, "\n" * 30, "a" + " " * 17 + "b", "mixed \t\n \t end", "▁ literal", "▁▁▁",
    "a▁b", "\u3000\u3000lead", "x\u2009y\u202fz\u205fw", "\u1680ogham",
    # numbers and symbols
    "0", "42", "12345678901234567890", "3.14159", "1,000,000", "2024-06-01", "v1.2.3", "$100.00",
    "50%", "-42", "+1 (555) 010-9999", "1e-7", "0x1F", "x86_64", "١٢٣٤", "१२३", "¹²³",
    "!!!", "...", "?!?!", "---", "***bold***", "(parenthesised)", "[brackets]", "{braces}",
    "<tag attr=\"v\">text</tag>", "a -> b => c", "x == y && y != z", "¯\\_(ツ)_/¯",
    "“curly quotes”", "‘single’", "em—dash – en", "wait…", "«guillemets»", "§ ¶ † ‡ •",
    "© ® ℃ ℉ № ℗", "∑∏∫√∞≈≠≤≥", "←↑→↓↔", "♠♣♥♦", "€£¥₹₿", "`~^|\\", "#include <stdio.h>",
    "https://example.com/path?q=1&r=two#frag", "user.name+tag@example.org", "C:\\Windows\\System32",
    # code
    "func main() {\n\tfmt.Println(\"hi\")\n}\n", "def f(x):\n    return x ** 2\n",
    "SELECT id FROM users WHERE age >= 18;", "{\"k\":\"v\",\"n\":-1.5e+10}", "camelCase snake_case kebab-case",
    # special-token look-alikes
    "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]", "[CLS] hello [SEP]", "[unused0]", "[cls]",
    "<s>", "</s>", "<pad>", "<unk>", "<mask>", "hello <mask> world", "<s>hello</s>", "<|endoftext|>",
    "<|im_start|>user", "##ing", "## heading", "#hashtag", "▁hello", "[MASK][MASK]", "<s><s>",
    # very long words and runs
    "a" * 100, "a" * 101, "b" * 99 + "é", "é" * 100, "é" * 101, "x" * 1000, "ab" * 300,
    "antidisestablishmentarianism" * 5, "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "中文" * 60 + "x" * 120, "😀" * 101, "1" * 150, "-" * 120, "_" * 64,
]

POOL = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    + list("     \t\t\n\r\u000b\u000c")
    + list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    + ["\u00a0", "\u3000", "\u2028", "\u200b", "\ufeff", "\u0085", "\u00ad", "\u0000", "\u0001", "\u007f",
       "\u0301", "\u0308", "\u0327", "\u0300", "\u034f", "é", "ñ", "ü", "ß", "ø", "İ", "Σ", "ﬁ", "Ａ", "ｶ", "ﾞ",
       "中", "文", "日", "本", "語", "ひ", "ら", "カ", "한", "국", "ا", "ل", "ع", "ש", "ל", "ह", "ि", "्", "क", "ष",
       "ภ", "า", "😀", "👍", "🏽", "\u200d", "\ufe0f", "🇺", "🇸", "²", "Ⅻ", "½", "１", "٣", "𝐀", "α", "ж", "€",
       "©", "\ufffd", "\ue000", "▁", "[CLS]", "[SEP]", "<s>", "</s>", "<mask>", "<unk>", "##", "e\u0301"]
)


def random_strings(n, seed):
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        out.append("".join(rnd.choice(POOL) for _ in range(rnd.randint(1, 40))))
    return out


def texts():
    seen, out = set(), []
    multi = corpus("multilingual.txt")
    gettysburg = corpus("gettysburg.txt")
    opticks = corpus("opticks.txt")
    paras = [p for p in opticks.split("\n\n") if p.strip()]
    extra = [multi, gettysburg] + [l for l in multi.split("\n") if l] + paras[100:2000:60]
    extra.append(opticks[:60000])  # a long document: about 13,000 tokens
    for t in HAND + extra + random_strings(150, 20240601):
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def wordpiece_reference():
    tk = Tokenizer.from_file(MINILM)
    tk.no_truncation()
    tk.no_padding()
    tk.encode_special_tokens = True
    return tk


def read_gguf_vocab(path):
    r = GGUFReader(path)

    def arr(key):
        f = r.fields[key]
        return [f.parts[i] for i in f.data]

    tokens = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in arr("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    charsmap = None
    if "tokenizer.ggml.precompiled_charsmap" in r.fields:
        f = r.fields["tokenizer.ggml.precompiled_charsmap"]
        charsmap = bytes(np.concatenate([f.parts[i] for i in f.data]).astype(np.uint8))
    return tokens, scores, types, charsmap


def unigram_reference(hide_specials):
    tokens, scores, types, charsmap = read_gguf_vocab(XLMR)
    n = max(i for i, t in enumerate(types) if t != 5) + 1  # unused padding is not HF's
    if any(t == 5 for t in types[:n]):
        sys.exit("unused tokens inside the vocabulary; parity.py expects them only at its end")
    vocab = []
    for i in range(n):
        tok = tokens[i]
        if hide_specials and types[i] in (2, 3):
            # A piece never holds "▁" after its start (Metaspace splits there).
            tok = "x\u2581" + tok
        vocab.append((tok, scores[i]))
    tk = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tk.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap), normalizers.Replace(Regex(" {2,}"), " ")])
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tk.add_special_tokens([AddedToken(vocab[i][0], special=True, normalized=False) for i in range(n) if types[i] in (2, 3)])
    tk.encode_special_tokens = True
    return tk


def normalizer_digest(normalizer):
    h = hashlib.sha256()
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        r = normalizer.normalize_str(c)
        if r != c:
            h.update(f"{cp:X}\t{r}\n".encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def render(source, digest, entries):
    head = json.dumps({"source": source, "tokenizers": tokenizers.__version__, "normalizer_sha256": digest}, ensure_ascii=False)
    body = ",\n".join(json.dumps(e, ensure_ascii=False) for e in entries)
    return head[:-1] + ', "entries": [\n' + body + "\n]}\n"


def build_wordpiece():
    tk = wordpiece_reference()
    entries = [{"text": t, "ids": tk.encode(t, add_special_tokens=False).ids} for t in texts()]
    return render("all-MiniLM-L6-v2 tokenizer.json sha256 " + MINILM_SHA256, normalizer_digest(tk.normalizer), entries)


def build_unigram():
    tk = unigram_reference(hide_specials=True)
    raw = unigram_reference(hide_specials=False)
    entries = []
    for t in texts():
        e = {"text": t, "ids": tk.encode(t, add_special_tokens=False).ids}
        r = raw.encode(t, add_special_tokens=False).ids
        if r != e["ids"]:
            e["hf_raw"] = r
        entries.append(e)
    # The Precompiled step alone: Replace never changes a single character.
    digest = normalizer_digest(normalizers.Precompiled(read_gguf_vocab(XLMR)[3]))
    return render("ggml-vocab-nomic-bert-moe.gguf (XLM-R) sha256 " + XLMR_SHA256, digest, entries)


def write_or_check(out, text, check, script, what):
    """Writes text to out, or with check says whether out already holds it; what
    describes the text for the message. Returns False when a check failed."""
    rel = os.path.relpath(out, ROOT)
    if not check:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {rel}: {what}, {len(text)} bytes")
        return True
    have = open(out, encoding="utf-8").read() if os.path.exists(out) else ""
    if have != text:
        print(f"{rel} is not what HF tokenizers {tokenizers.__version__} gives now; run tools/hf-tokenizers/{script}", file=sys.stderr)
        return False
    print(f"{rel}: {what}, HF tokenizers {tokenizers.__version__} agrees")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    for path, want in ((MINILM, MINILM_SHA256), (XLMR, XLMR_SHA256)):
        if not os.path.exists(path):
            sys.exit(f"{os.path.relpath(path, ROOT)} is missing: run scripts/fetch-encoders.sh")
        if sha256_file(path) != want:
            sys.exit(f"{os.path.relpath(path, ROOT)} is not the pinned file; run scripts/fetch-encoders.sh")
    failed = False
    for out, build in ((OUT_WP, build_wordpiece), (OUT_UG, build_unigram)):
        text = build()
        n = text.count('{"text"')
        failed |= not write_or_check(out, text, args.check, "parity.py", f"{n} texts")
    if failed:
        sys.exit(1)

if __name__ == "__main__":
    main()
