#!/usr/bin/env python3
"""minilm_reference.py writes backends/llama/testdata/minilm-reference.json: the
all-MiniLM-L6-v2 sentence vectors (mean pooling, before sentence-transformers' final
L2 normalisation) of 200+ texts, computed from the real checkpoint
(.cache/minilm/model.safetensors) by an independent float64 BERT forward pass in
numpy, with the ids of HF's tokenizer ([CLS] ... [SEP], the model's tokenizer.json).

Why numpy and not sentence-transformers on torch: PyPI's torch wheel for Linux pulls
the CUDA libraries (several GB) and would not fit CI's time; this forward pass is
BertModel's (post-LayerNorm encoder, erf GELU, absolute positions, token type 0)
written out in 40 lines, and the vectors it gives are what sentence-transformers gives
up to float32 rounding.

Usage (repository root, venv of tools/hf-tokenizers/requirements.txt):
    python tools/hf-tokenizers/minilm_reference.py          # rewrite the file
    python tools/hf-tokenizers/minilm_reference.py --check  # recompute, compare (cosine)
"""
import argparse
import base64
import json
import math
import os
import struct
import sys

import numpy as np
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIR = os.path.join(ROOT, ".cache", "minilm")
OUT = os.path.join(ROOT, "backends", "llama", "testdata", "minilm-reference.json")

TEXTS = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.", "How do I bake sourdough bread?",
    "Sourdough needs a starter, flour, water and salt, and a long slow rise.",
    "What is the capital of France?", "Paris is the capital and largest city of France.",
    "Berlin is the capital of Germany.", "The Eiffel Tower was completed in 1889.",
    "How many legs does a spider have?", "Spiders have eight legs and two body segments.",
    "Insects have six legs.", "Python is a programming language.", "Pythons are large snakes found in Africa and Asia.",
    "The stock market fell sharply on Monday.", "Shares dropped as investors worried about inflation.",
    "It is going to rain tomorrow.", "The forecast says showers are likely tomorrow afternoon.",
    "I love my cat.", "My dog loves to play fetch in the park.", "Embeddings map text to vectors.",
    "Similar sentences have similar embeddings.", "The quick brown fox jumps over the lazy dog.",
    "hello world", "Hello, World!", "a", "?", "12345", "3.14159 is pi", "user@example.com",
    "https://example.com/path?q=1", "C'est la vie.", "Je m'appelle Marie et j'habite à Paris.",
    "Où est la gare, s'il vous plaît ?", "Das ist ein schönes Haus.", "Wie spät ist es?",
    "¿Dónde está la biblioteca?", "El perro corre en el parque.", "A rápida raposa marrom.",
    "Questo è un bel giorno.", "Dit is een mooie dag.", "Det är en vacker dag.", "Hyvää huomenta!",
    "Dzień dobry, jak się masz?", "Привет, как дела?", "Москва — столица России.",
    "Γειά σου κόσμε", "Merhaba dünya", "Xin chào thế giới", "Selamat pagi", "Habari ya asubuhi",
    "你好，世界", "我爱北京天安门", "今天天气很好。", "日本語のテキストです。", "東京は日本の首都です。",
    "안녕하세요, 만나서 반갑습니다.", "서울은 한국의 수도입니다.", "مرحبا بالعالم", "القاهرة عاصمة مصر",
    "שלום עולם", "नमस्ते दुनिया", "भारत की राजधानी नई दिल्ली है।", "สวัสดีครับ", "ሰላም", "გამარჯობა",
    "😀", "I ❤️ NY", "🍕🍔🍟", "Great job! 👍🏽", "👨\u200d👩\u200d👧\u200d👦 family", "🇺🇸🇯🇵 flags",
    "café crème brûlée", "naïve résumé", "Ångström", "ﬁne ligature", "Ｆｕｌｌｗｉｄｔｈ",
    "[CLS] looks special", "<s> and </s>", "<|endoftext|>", "##ing", "unaffable unbelievably",
    "Supercalifragilisticexpialidocious", "antidisestablishmentarianism", "x" * 120,
    "tab\tseparated\tvalues", "line one\nline two", "   spaces   around   ", "MIXED case Text",
    "def f(x):\n    return x * 2", "SELECT * FROM users WHERE id = 1;", "{\"key\": \"value\"}",
    "The mitochondria is the powerhouse of the cell.", "Photosynthesis converts light into chemical energy.",
    "Water boils at 100 degrees Celsius at sea level.", "The Earth orbits the Sun once a year.",
    "Shakespeare wrote Hamlet.", "Beethoven composed nine symphonies.", "The Mona Lisa hangs in the Louvre.",
    "A car needs fuel to run.", "Electric cars use batteries.", "Bicycles are good for the environment.",
    "The train leaves at 9 am.", "My flight was delayed by two hours.", "The hotel room was clean and quiet.",
    "This restaurant serves the best pizza in town.", "The soup was too salty.", "I would like a cup of coffee.",
    "Tea or coffee?", "The meeting has been moved to Thursday.", "Please send me the report by Friday.",
    "Thank you for your help!", "Sorry, I don't understand.", "Can you repeat that, please?",
    "The patient was given antibiotics.", "The doctor prescribed rest and fluids.", "Exercise improves heart health.",
    "Machine learning models need data.", "Neural networks learn representations.", "GPUs accelerate matrix multiplication.",
    "The server returned a 500 error.", "Restart the service and check the logs.", "The database connection timed out.",
    "She sells sea shells by the sea shore.", "Peter Piper picked a peck of pickled peppers.",
    "To be, or not to be, that is the question.", "All that glitters is not gold.",
    "The early bird catches the worm.", "Actions speak louder than words.", "Knowledge is power.",
    "The children are playing in the garden.", "Kids play outside in the yard.", "The old man walked slowly.",
    "A cat sat on the mat.", "The mat had a cat on it.", "Dogs bark at strangers.", "Birds fly south in winter.",
    "The river flows into the sea.", "Mountains are covered with snow.", "The desert is hot and dry.",
    "The library opens at ten.", "Books are on the top shelf.", "I am reading a novel about pirates.",
    "Football is popular in Brazil.", "He scored a goal in the last minute.", "The team won the championship.",
    "Chess is a game of strategy.", "She plays the piano beautifully.", "The concert was sold out.",
    "Vaccines prevent disease.", "Wash your hands often.", "Sleep is important for memory.",
    "The recipe calls for two eggs.", "Preheat the oven to 180 degrees.", "Add salt and pepper to taste.",
    "The baby is sleeping.", "The infant is asleep.", "The toddler is crying.",
    "Quantum computers use qubits.", "Classical bits are zero or one.", "Entanglement links particles.",
    "Climate change raises sea levels.", "Glaciers are melting.", "Renewable energy reduces emissions.",
    "The password must contain a number.", "Two-factor authentication improves security.",
    "The invoice is attached.", "Payment is due within thirty days.", "The contract was signed yesterday.",
    "Where can I buy a ticket?", "The museum is closed on Mondays.", "The bus stop is around the corner.",
    "He apologised for being late.", "She laughed at the joke.", "They argued about politics.",
    "The moon is full tonight.", "Stars twinkle in the night sky.", "A comet passed near Earth.",
    "The painting uses bright colours.", "The sculpture is made of marble.", "The photo is black and white.",
    "Gold is a precious metal.", "Iron rusts when wet.", "Copper conducts electricity.",
    "The election results were announced.", "The president gave a speech.", "Parliament passed the law.",
    "I forgot my umbrella.", "It stopped raining.", "The sun came out after the storm.",
    "Cats are independent animals.", "Dogs are loyal companions.", "Fish live in water.",
    "Ceci n'est pas une pipe.", "Ich bin ein Berliner.", "Veni, vidi, vici.", "Carpe diem.",
    "Ἐν ἀρχῇ ἦν ὁ λόγος", "Лев Толстой написал «Войну и мир».", "孔子是中国古代的思想家。",
    "Fußgängerübergänge sind wichtig.", "Ça va très bien, merci !", "İstanbul Boğazı çok güzel.",
]

# Pairs (query index, document index) of the retrieval check: each query's nearest
# neighbour among all texts must be the same for llama.cpp as for this reference.
QUERIES = [9, 11, 15, 20, 22, 30, 60, 65, 100, 120, 140, 160, 190]


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return out


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x):  # BERT's "gelu": the exact one, with erf
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def encode(w, cfg, ids, types=None):
    """BertModel's last hidden states of the token ids (token types 0 unless given:
    a cross-encoder's pair, crossencoder_reference.py)."""
    eps, heads = cfg["layer_norm_eps"], cfg["num_attention_heads"]
    n = len(ids)
    typ = w["embeddings.token_type_embeddings.weight"][types if types is not None else [0] * n]
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n] + typ
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    d = x.shape[1] // heads
    for l in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{l}."
        lin = lambda t, name: t @ w[p + name + ".weight"].T + w[p + name + ".bias"]
        q = lin(x, "attention.self.query").reshape(n, heads, d).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(n, heads, d).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(n, heads, d).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, heads * d)
        x = layer_norm(x + lin(ctx, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps)
        h = gelu(lin(x, "intermediate.dense"))
        x = layer_norm(x + lin(h, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    return x


def forward(w, cfg, ids):
    return encode(w, cfg, ids).mean(0)  # mean pooling over every token ([CLS] and [SEP] included)


def compute():
    with open(os.path.join(DIR, "config.json")) as f:
        cfg = json.load(f)
    w = load_safetensors(os.path.join(DIR, "model.safetensors"))
    tk = Tokenizer.from_file(os.path.join(DIR, "tokenizer.json"))
    tk.no_truncation()
    tk.no_padding()
    tk.encode_special_tokens = True
    ids = [tk.encode(t).ids for t in TEXTS]
    vecs = [forward(w, cfg, i).astype(np.float32) for i in ids]
    return ids, vecs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if len(set(TEXTS)) != len(TEXTS) or len(TEXTS) < 200:
        sys.exit(f"{len(TEXTS)} texts ({len(set(TEXTS))} distinct); want 200 distinct")
    ids, vecs = compute()
    rel = os.path.relpath(OUT, ROOT)
    if args.check:
        with open(OUT, encoding="utf-8") as f:
            have = json.load(f)
        if have["texts"] != TEXTS or have["ids"] != ids:
            sys.exit(f"{rel}: texts or ids differ from what HF's tokenizer gives now; run tools/hf-tokenizers/minilm_reference.py")
        worst = 1.0
        for b64, v in zip(have["vectors"], vecs):
            h = np.frombuffer(base64.b64decode(b64), dtype="<f4").astype(np.float64)
            worst = min(worst, float(h @ v / np.linalg.norm(h) / np.linalg.norm(v)))
        if worst < 0.999999:
            sys.exit(f"{rel}: a recomputed vector has cosine {worst:.7f} with the committed one (want >= 0.999999)")
        print(f"{rel}: {len(TEXTS)} vectors recomputed, lowest cosine {worst:.9f}")
        return
    doc = {
        "model": "all-MiniLM-L6-v2 (.cache/minilm, scripts/fetch-encoders.sh)",
        "pooling": "mean over every token, not normalised",
        "queries": QUERIES,
        "texts": TEXTS,
        "ids": ids,
        "vectors": [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vecs],
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {rel}: {len(TEXTS)} texts, longest {max(map(len, ids))} tokens")


if __name__ == "__main__":
    main()
