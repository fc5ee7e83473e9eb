#!/usr/bin/env python3
"""crossencoder_reference.py writes backends/llama/testdata/crossencoder-reference.json
and crossencoder-xlmr-reference.json: the relevance logits of query-document pairs
scored by the random-weight cross-encoders models/bert-reranker-tiny.gguf (BERT,
MiniLM's WordPiece, two token types: an ms-marco MiniLM) and
models/xlmr-reranker-tiny.gguf (XLM-R's Unigram, one token type: a bge-reranker),
both from `make models` (cmd/genmodel -arch bert -task rerank, a fixed seed, so the
same files on every machine), computed by an independent float64 forward pass in
numpy, as Hugging Face's BertForSequenceClassification and
XLMRobertaForSequenceClassification (sentence-transformers' CrossEncoder) compute
them:

- the pair tokenized by HF's tokenizer as a pair: MiniLM's tokenizer.json,
  `[CLS] query [SEP] document [SEP]` with its token type ids from HF's post-processor
  (0 for the query's segment, 1 for the document's); XLM-R's Unigram
  (parity.unigram_reference) with RoBERTa's post-processor, `<s> query </s></s>
  document </s>`, every token type 0;
- BertModel's encoder (minilm_reference.encode), word + position + token-type
  embeddings;
- the pooler, tanh(W x[CLS] + b), and the one-output classifier: the logit. The
  score is sigmoid(logit), CrossEncoder's default activation for one label.

The weights are read from the GGUF with the gguf package (llama.cpp's gguf-py, a plain
file reader), each tensor by the Hugging Face name of the layer it holds.

Usage (repository root, venv of tools/hf-tokenizers/requirements.txt):
    python tools/hf-tokenizers/crossencoder_reference.py          # rewrite the file
    python tools/hf-tokenizers/crossencoder_reference.py --check  # recompute, compare
"""
import argparse
import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from tokenizers import Tokenizer

from minilm_reference import encode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTDATA = os.path.join(ROOT, "backends", "llama", "testdata")
# model file, tokenizer, reference file
MODELS = [
    ("bert-reranker-tiny.gguf", "wordpiece", "crossencoder-reference.json"),
    ("xlmr-reranker-tiny.gguf", "unigram", "crossencoder-xlmr-reference.json"),
]

QUERIES = [
    "What is the capital of France?",
    "how many legs does a spider have",
    "Wie spät ist es?",
]
DOCUMENTS = [
    "Paris is the capital and largest city of France.",
    "Berlin is the capital of Germany.",
    "Spiders have eight legs and two body segments.",
    "Insects have six legs.",
    "Es ist halb neun.",
    "The Eiffel Tower was completed in 1889.",
    "[SEP] looks like a separator [CLS]",
    "café crème brûlée 😀",
    "",
    "A long document about many things: " + "the river flows into the sea, " * 12,
]

# GGUF tensor name -> Hugging Face BertForSequenceClassification name (without "bert.").
NAMES = {
    "token_embd.weight": "embeddings.word_embeddings.weight",
    "token_types.weight": "embeddings.token_type_embeddings.weight",
    "position_embd.weight": "embeddings.position_embeddings.weight",
    "token_embd_norm.weight": "embeddings.LayerNorm.weight",
    "token_embd_norm.bias": "embeddings.LayerNorm.bias",
    "cls.weight": "pooler.dense.weight",
    "cls.bias": "pooler.dense.bias",
    "cls.output.weight": "classifier.weight",
    "cls.output.bias": "classifier.bias",
}
LAYER = {
    "attn_q": "attention.self.query", "attn_k": "attention.self.key", "attn_v": "attention.self.value",
    "attn_output": "attention.output.dense", "attn_output_norm": "attention.output.LayerNorm",
    "ffn_up": "intermediate.dense", "ffn_down": "output.dense", "layer_output_norm": "output.LayerNorm",
}


def hf_name(name):
    if name in NAMES:
        return NAMES[name]
    blk, l, layer, kind = name.split(".")
    assert blk == "blk", name
    return f"encoder.layer.{l}.{LAYER[layer]}.{kind}"


def load(model):
    r = GGUFReader(model)
    field = lambda k: r.fields[k].parts[r.fields[k].data[0]]
    cfg = {
        "layer_norm_eps": float(field("bert.attention.layer_norm_epsilon")[0]),
        "num_attention_heads": int(field("bert.attention.head_count")[0]),
        "num_hidden_layers": int(field("bert.block_count")[0]),
    }
    w = {hf_name(t.name): np.array(t.data, dtype=np.float64).reshape(t.data.shape) for t in r.tensors}
    return cfg, w


def score(w, cfg, ids, types):
    x = encode(w, cfg, ids, types)
    pooled = np.tanh(w["pooler.dense.weight"] @ x[0] + w["pooler.dense.bias"])
    return float((w["classifier.weight"] @ pooled + w["classifier.bias"])[0])


def tokenizer(kind):
    if kind == "wordpiece":
        return Tokenizer.from_file(os.path.join(ROOT, ".cache", "minilm", "tokenizer.json"))
    from parity import unigram_reference
    from tokenizers import processors
    tk = unigram_reference(hide_specials=True)
    tk.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return tk


def compute(model, kind):
    cfg, w = load(model)
    tk = tokenizer(kind)
    tk.no_truncation()
    tk.no_padding()
    tk.encode_special_tokens = True
    pairs = []
    for q in QUERIES:
        for d in DOCUMENTS:
            e = tk.encode(q, d)
            pairs.append({"query": q, "document": d, "ids": e.ids, "types": e.type_ids,
                          "logit": score(w, cfg, e.ids, e.type_ids)})
    return pairs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    for name, kind, out in MODELS:
        one(os.path.join(ROOT, "models", name), kind, os.path.join(TESTDATA, out), args.check)


def one(model, kind, out, check):
    pairs = compute(model, kind)
    rel = os.path.relpath(out, ROOT)
    if check:
        with open(out, encoding="utf-8") as f:
            have = json.load(f)["pairs"]
        if [(p["query"], p["document"], p["ids"], p["types"]) for p in have] != [(p["query"], p["document"], p["ids"], p["types"]) for p in pairs]:
            sys.exit(f"{rel}: pairs, ids or token types differ from what HF's tokenizer gives now; run tools/hf-tokenizers/crossencoder_reference.py")
        worst = max(abs(a["logit"] - b["logit"]) for a, b in zip(have, pairs))
        if worst > 1e-9:
            sys.exit(f"{rel}: a recomputed logit differs from the committed one by {worst:g} (want <= 1e-9); was {os.path.relpath(model, ROOT)} regenerated differently?")
        print(f"{rel}: {len(pairs)} pairs recomputed, largest logit difference {worst:g}")
        return
    doc = {
        "model": os.path.relpath(model, ROOT) + " (cmd/genmodel -arch bert -task rerank -shape tiny, seed 1)",
        "score": "logit of the classification head (dense, tanh, one-output classifier) over the first token; relevance = sigmoid(logit)",
        "pairs": pairs,
    }
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    logits = [p["logit"] for p in pairs]
    print(f"wrote {rel}: {len(pairs)} pairs, longest {max(len(p['ids']) for p in pairs)} tokens, logits {min(logits):.3f} to {max(logits):.3f}")


if __name__ == "__main__":
    main()
