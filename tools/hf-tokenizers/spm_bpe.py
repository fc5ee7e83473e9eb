#!/usr/bin/env python3
"""spm_bpe.py makes the SentencePiece BPE test vocabulary (tokenizer.ggml.model "llama",
as EmbeddingGemma's) and the ground truth package tokenizer is held to for it.

No real Gemma vocabulary can be had here (no package on the Python index ships
Gemma's tokenizer.model or tokenizer.json), so the vocabulary is a real SentencePiece
BPE model trained with Gemma's options by the `sentencepiece` package:

  train    trains tokenizer/testdata/spm-bpe.model (8192 pieces, byte fallback, no
           dummy prefix, identity normaliser, digits split, whitespace-only pieces
           allowed, <pad> <eos> <bos> <unk> as ids 0 to 3 and user-defined symbols as
           Gemma's: turn markers, runs of spaces, tabs and newlines, HTML tags) on a
           multilingual corpus made from testdata/corpus and XLM-R's vocabulary. The
           model file is committed; training is here to say how it was made.
  gguf     writes tokenizer/testdata/spm-bpe-vocab.gguf: the vocabulary as llama.cpp's
           convert_hf_to_gguf.py writes it for Gemma 3 and EmbeddingGemma
           (_set_vocab_sentencepiece, the tokenizer_config.json pass over the added
           tokens, add_space_prefix false, the special ids, add_bos and add_eos).
  llama    writes tokenizer/testdata/parity-spm-bpe-llama.json the same way for a
           real SentencePiece BPE vocabulary with a dummy prefix: Llama 2's, as
           llama.cpp ships it (models/ggml-vocab-llama-spm.gguf in the llama-cpp-python
           sdist; scripts/fetch-encoders.sh), loaded into what LlamaConverter writes
           (legacy: Prepend("▁"), Replace(" ", "▁"), BPE with byte fallback and
           generate_merges over the scores; <s> and </s> special).
  parity   writes tokenizer/testdata/parity-spm-bpe.json: the ids of the Hugging Face
           tokenizer that transformers' GemmaConverter makes of the model (the
           tokenizer.json a Gemma checkpoint ships: Replace(" ", "▁"), Split(" "), BPE
           with byte fallback and merges from the piece scores), for parity.py's texts,
           without special tokens and with split_special_tokens=True.
           --check fails if the committed file differs.

transformers 5.23.0's GemmaSentencePieceExtractor reads self.sp, which nothing sets;
the converter here is GemmaConverter with that one attribute set (a
SentencePieceProcessor of the same file), nothing else changed.

Usage (repository root, the venv of tools/hf-tokenizers/requirements-spm.txt):
    python tools/hf-tokenizers/spm_bpe.py gguf parity
    python tools/hf-tokenizers/spm_bpe.py parity --check
"""
import argparse
import hashlib
import json
import math
import os
import random
import sys
import tempfile
import types

import parity as p

ROOT = p.ROOT
MODEL = os.path.join(ROOT, "tokenizer", "testdata", "spm-bpe.model")
GGUF = os.path.join(ROOT, "tokenizer", "testdata", "spm-bpe-vocab.gguf")
OUT = os.path.join(ROOT, "tokenizer", "testdata", "parity-spm-bpe.json")
XLMR = os.path.join(ROOT, ".cache", "xlmr", "ggml-vocab-nomic-bert-moe.gguf")
LLAMA = os.path.join(ROOT, ".cache", "llama-spm", "ggml-vocab-llama-spm.gguf")
LLAMA_SHA256 = "16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69"
OUT_LLAMA = os.path.join(ROOT, "tokenizer", "testdata", "parity-spm-bpe-llama.json")

# Gemma's user-defined symbols, in kind: the turn markers (which GemmaConverter makes
# special), runs of whitespace (Gemma has them up to 31 long) and HTML tags.
USER_DEFINED = (
    ["<start_of_turn>", "<end_of_turn>", "<mask>"]
    + ["\u2581" * n for n in (2, 3, 4, 8, 16)]
    + ["\n" * n for n in (2, 3, 4)]
    + ["\t" * n for n in (2, 3, 4)]
    + ["<h1>", "</h1>", "<table>", "<td>", "</td>", "<br>"]
)


# Texts beyond parity.py's that only a SentencePiece BPE vocabulary makes hard: its
# control and byte pieces spelt out, Gemma's turn markers, the user-defined runs of
# whitespace and HTML tags amid text, and a literal "▁".
EXTRA = [
    "<start_of_turn>user\nWhat is light?<end_of_turn>\n<start_of_turn>model", "<bos>", "<eos>", "<pad>",
    "<unk>", "<mask>", "<bos>text<eos>", "<0x41>", "<0x0A>\n", "<0xFF>", "\t", "\tindented", "\t\t\tthree tabs",
    "a  b   c    d     e", " " * 40 + "x", "x" + "\t" * 9 + "y", "\n\n\n\n\n\n\n", "<h1>Title</h1><br>",
    "<table><td>1</td></table>", "<h1 class=x>", "\u2581\u2581", "\u2581 \u2581", " \u2581\u2581 ", "task: search result | query: ",
    "title: none | text: ", "2024-12-02 14:30:00", "1234567890" * 3,
    # EmbeddingGemma's prompts around a text, as the server tokenizes them
    # (cmd/embed-stack's TestServeEmbeddingGemma reads these).
    "task: search result | query: What is the speed of light?",
    "task: clustering | query: What is the speed of light?",
    "title: none | text: Light travels at about 300,000 km per second in a vacuum.",
]


def texts():
    out = p.texts()
    seen = set(out)
    return out + [t for t in EXTRA if t not in seen]


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def training_corpus(path):
    """Writes the training text: the repository's corpus (English, 13 other languages,
    code) and 30,000 pseudo-sentences drawn from XLM-R's Unigram pieces by their
    probabilities, which cover every script XLM-R was trained on."""
    lines = []
    for name in ("opticks.txt", "gettysburg.txt", "multilingual.txt"):
        with open(os.path.join(ROOT, "testdata", "corpus", name), encoding="utf-8") as f:
            lines += [l for l in f.read().split("\n") if l.strip()]
    code = os.path.join(ROOT, "testdata", "corpus", "code")
    for name in sorted(os.listdir(code)):
        with open(os.path.join(code, name), encoding="utf-8") as f:
            lines += [l for l in f.read().split("\n") if l.strip()]
    toks, scores, kinds, _ = p.read_gguf_vocab(XLMR)
    pieces = [(t, math.exp(s)) for t, s, k in zip(toks, scores, kinds) if k == 1 and t != "\u2581"]
    rnd = random.Random(20260601)
    words, weights = [p for p, _ in pieces], [w for _, w in pieces]
    for _ in range(30000):
        s = "".join(rnd.choices(words, weights, k=rnd.randint(4, 16))).replace("\u2581", " ").strip()
        if s:
            lines.append(s)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def train():
    import sentencepiece as spm

    with tempfile.TemporaryDirectory() as d:
        corpus = os.path.join(d, "corpus.txt")
        training_corpus(corpus)
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=os.path.join(d, "m"), model_type="bpe", vocab_size=8192,
            character_coverage=0.9995, byte_fallback=True, split_digits=True,
            split_by_unicode_script=True, split_by_whitespace=True, split_by_number=True,
            allow_whitespace_only_pieces=True, treat_whitespace_as_suffix=False,
            normalization_rule_name="identity", add_dummy_prefix=False, remove_extra_whitespaces=False,
            pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>",
            bos_piece="<bos>", unk_piece="<unk>", user_defined_symbols=USER_DEFINED,
            max_sentencepiece_length=16, num_threads=1, input_sentence_size=0,
            shuffle_input_sentence=False, minloglevel=2,
        )
        with open(os.path.join(d, "m.model"), "rb") as f:
            model = f.read()
    with open(MODEL, "wb") as f:
        f.write(model)
    print(f"wrote {os.path.relpath(MODEL, ROOT)}: {len(model)} bytes, sha256 {sha256_file(MODEL)}")


def reference():
    """The HF tokenizer transformers' GemmaConverter makes of the model."""
    import sentencepiece as spm
    from transformers.convert_slow_tokenizer import GemmaConverter, GemmaSentencePieceExtractor

    class Extractor(GemmaSentencePieceExtractor):
        def __init__(self, model):
            super().__init__(model)
            self.sp = spm.SentencePieceProcessor(model_file=model)

    class Converter(GemmaConverter):
        SpmExtractor = Extractor

    slow = types.SimpleNamespace(vocab_file=MODEL, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
    tk = Converter(slow).converted()
    tk.encode_special_tokens = True
    return tk


def write_gguf():
    """The vocabulary as llama.cpp's converter writes a Gemma 3 / EmbeddingGemma one:
    every piece with its score and SentencePiece type, then each token of the HF
    tokenizer's added_tokens_decoder (tokenizer_config.json) retyped, control when
    special, else user-defined with its "▁" written as spaces, score -1000."""
    import gguf
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=MODEL)
    n = sp.vocab_size()
    tokens, scores, kinds = [], [], []
    for i in range(n):
        kind = 1
        if sp.IsUnknown(i):
            kind = 2
        elif sp.IsControl(i):
            kind = 3
        elif sp.IsUnused(i):
            kind = 5
        elif sp.IsByte(i):
            kind = 6
        tokens.append(sp.IdToPiece(i))
        scores.append(sp.GetScore(i))
        kinds.append(kind)
    tk = reference()
    for i, added in sorted(tk.get_added_tokens_decoder().items()):
        if added.special:
            kinds[i] = 3
        else:
            kinds[i] = 4
            tokens[i] = added.content.replace("\u2581", " ")
        scores[i] = -1000.0
    # GGUFWriter takes an architecture only to name the file's hyperparameter keys;
    # a vocabulary-only file holds none, as llama.cpp's models/ggml-vocab-*.gguf.
    w = gguf.GGUFWriter(GGUF, "gemma-embedding")
    w.add_name("spm-bpe test vocabulary")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(kinds)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    w.add_add_space_prefix(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {os.path.relpath(GGUF, ROOT)}: {n} tokens, {os.path.getsize(GGUF)} bytes")


def llama_reference():
    from tokenizers import AddedToken, Tokenizer, models, normalizers
    from transformers.tokenization_utils_base import generate_merges

    toks, scores, kinds, _ = p.read_gguf_vocab(LLAMA)
    vocab_scores = list(zip(toks, scores))
    vocab = {t: i for i, t in enumerate(toks)}
    merges = generate_merges(vocab, vocab_scores)
    tk = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True, dropout=None))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tk.add_tokens([AddedToken(t, normalized=False, special=k == 3) for t, k in zip(toks, kinds) if k in (3, 4)])
    tk.encode_special_tokens = True
    return tk, {i for i, k in enumerate(kinds) if k in (2, 3)}


def parity(check, llama=False):
    import tokenizers

    if llama:
        if sha256_file(LLAMA) != LLAMA_SHA256:
            sys.exit(f"{os.path.relpath(LLAMA, ROOT)} is not the pinned file; run scripts/fetch-encoders.sh")
        tk, specials = llama_reference()
        source = "ggml-vocab-llama-spm.gguf (Llama 2) sha256 " + LLAMA_SHA256
        out, converter = OUT_LLAMA, "transformers LlamaConverter (legacy)"
    else:
        tk = reference()
        specials = {i for i, a in tk.get_added_tokens_decoder().items() if a.special} | {3}
        source = "spm-bpe.model (SentencePiece BPE, Gemma's options) sha256 " + sha256_file(MODEL)
        out, converter = OUT, "transformers GemmaConverter"
    entries = []
    for t in texts():
        ids = tk.encode(t, add_special_tokens=False).ids
        if specials & set(ids):
            sys.exit(f"HF produced a control or unknown id for {t!r}: {ids}; the server never does")
        entries.append({"text": t, "ids": ids})
    head = json.dumps({"source": source, "converter": converter, "tokenizers": tokenizers.__version__}, ensure_ascii=False)
    text = head[:-1] + ', "entries": [\n' + ",\n".join(json.dumps(e, ensure_ascii=False) for e in entries) + "\n]}\n"
    if not p.write_or_check(out, text, check, "spm_bpe.py", f"{len(entries)} texts"):
        sys.exit(1)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", nargs="+", choices=["train", "gguf", "parity", "llama"])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    for step in args.steps:
        if step == "train":
            train()
        elif step == "gguf":
            write_gguf()
        else:
            parity(args.check, llama=step == "llama")


if __name__ == "__main__":
    main()
