"""langchain-openai's OpenAIEmbeddings with its defaults against the real server. By
default it tokenizes every text with tiktoken (cl100k_base for any model name it does
not know), cuts texts longer than 8191 tokens into pieces, sends the token ids in
requests of 1000 pieces, and averages a long text's pieces weighted by their token
counts. The server decodes the ids back to text (--token-ids=cl100k), so every
vector must be the one of the same text sent as a string, and a long text's vector
the same weighted average of its pieces' vectors."""

import random

import numpy as np
import pytest
import tiktoken
from langchain_openai import OpenAIEmbeddings

from helpers import assert_same, cosine, raw_vectors

COSINE_MIN = 0.99999
CTX = 8191  # LangChain's embedding_ctx_length
N_TEXTS = 2500
LONG_AT = 1234  # where the long text sits among the others

WORDS = ("river stone light paper garden engine window silver market winter forest "
         "signal harbor copper meadow lantern orbit velvet canyon thunder pencil "
         "quartz ember violet saddle mirror timber falcon glacier ribbon").split()


def corpus():
    """N_TEXTS distinct short texts and, at LONG_AT, one of more than CTX cl100k tokens
    (ASCII, so its token pieces are exact substrings of it)."""
    rng = random.Random(12)
    texts = [f"Document {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14))) + "."
             for i in range(N_TEXTS)]
    long_words = []
    while len(long_words) < 9000:
        long_words.extend(rng.sample(WORDS, len(WORDS)))
    texts[LONG_AT] = "A long report. " + " ".join(long_words) + " The end."
    return texts


class Recorder:
    """Wraps the embeddings resource LangChain calls, recording what each request
    sent: the number of inputs and whether they were token ids."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def create(self, **kw):
        inp = kw["input"]
        self.calls.append((len(inp), all(isinstance(x, list) and all(isinstance(t, int) for t in x) for x in inp)))
        return self.inner.create(**kw)


def test_embed_documents_2500_with_a_long_text(server):
    texts = corpus()
    enc = tiktoken.get_encoding("cl100k_base")
    long_ids = enc.encode_ordinary(texts[LONG_AT])
    assert len(long_ids) > CTX, f"the long text has {len(long_ids)} cl100k tokens"
    assert all(len(enc.encode_ordinary(t)) <= CTX for i, t in enumerate(texts) if i != LONG_AT)

    emb = OpenAIEmbeddings(base_url=server.url + "/v1", api_key="unused")
    assert (emb.model, emb.chunk_size, emb.embedding_ctx_length, emb.check_embedding_ctx_length) == \
        ("text-embedding-ada-002", 1000, CTX, True), "LangChain's defaults changed"
    rec = Recorder(emb.client)
    emb.client = rec
    got = emb.embed_documents(texts)

    # 2501 pieces (the long text is two), as token ids, in requests of 1000.
    assert rec.calls == [(1000, True), (1000, True), (501, True)], rec.calls
    assert len(got) == N_TEXTS

    want = raw_vectors(server.url, [t for i, t in enumerate(texts) if i != LONG_AT])
    short = [v for i, v in enumerate(got) if i != LONG_AT]
    cos = np.array([cosine(a, b) for a, b in zip(short, want)])
    worst = int(np.argmin(cos))
    assert cos.min() >= COSINE_MIN, f"text {worst}: cosine {cos[worst]:.7f} with the same text sent as a string"
    for i in (0, 1, N_TEXTS - 2):
        assert_same(short[i], want[i], f"text {i}", tol=1e-6)
    # Same order: each vector is nearer its own text's than any neighbour's.
    assert all(cosine(short[i], want[i]) > cosine(short[i], want[i + 1]) for i in range(0, len(want) - 1, 97))

    # The long text: LangChain's weighted average of its pieces, computed here from
    # the server's vectors of the pieces' text.
    pieces = [long_ids[j:j + CTX] for j in range(0, len(long_ids), CTX)]
    piece_texts = [enc.decode(p) for p in pieces]
    assert "".join(piece_texts) == texts[LONG_AT] and len(pieces) == 2
    vecs = raw_vectors(server.url, piece_texts)
    avg = np.average(np.stack(vecs), axis=0, weights=[len(p) for p in pieces])
    ref = avg / np.linalg.norm(avg)
    c = cosine(got[LONG_AT], ref)
    assert c >= COSINE_MIN, f"long text: cosine {c:.7f} with the weighted average of its pieces"
    assert abs(np.linalg.norm(got[LONG_AT]) - 1) < 1e-5
    # ... and not simply the first piece's vector, nor the whole text's.
    assert cosine(got[LONG_AT], vecs[0]) < COSINE_MIN
    whole = raw_vectors(server.url, [texts[LONG_AT]])[0]
    assert cosine(got[LONG_AT], whole) < COSINE_MIN


def test_query_suffix_and_dimensions(server):
    text = "what do llamas eat"
    base = server.url + "/v1"
    q = OpenAIEmbeddings(base_url=base, api_key="unused", model="qwen3-embedding-0.6b:query").embed_query(text)
    d = OpenAIEmbeddings(base_url=base, api_key="unused").embed_query(text)
    small = OpenAIEmbeddings(base_url=base, api_key="unused", model="text-embedding-3-small", dimensions=48).embed_query(text)
    want_q = raw_vectors(server.url, [text], input_type="query")[0]
    want_d = raw_vectors(server.url, [text], input_type="document")[0]
    want_small = raw_vectors(server.url, [text], dimensions=48)[0]
    assert_same(q, want_q, "the :query model suffix makes a query")
    assert_same(d, want_d, "the default model embeds a document")
    assert_same(small, want_small, "dimensions 48")
    assert cosine(q, d) < 0.999


def test_tiktoken_reads_cl100k_offline():
    """tiktoken loads cl100k_base from TIKTOKEN_CACHE_DIR without any download: with its
    downloader replaced by one that fails, the encoding still loads (in a fresh
    process, as tiktoken caches encodings per process)."""
    import subprocess
    import sys
    code = ("import tiktoken.load as l\n"
            "def no_network(path): raise RuntimeError('tiktoken tried to download ' + path)\n"
            "l.read_file = no_network\n"
            "import tiktoken\n"
            "print(tiktoken.get_encoding('cl100k_base').encode('hello world'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[15339, 1917]"


@pytest.fixture(autouse=True)
def _no_tiktoken_download(monkeypatch):
    """No test here may download tiktoken's file: a cache miss fails loudly."""
    import tiktoken.load

    def no_network(path):
        raise RuntimeError(f"tiktoken tried to download {path}; is TIKTOKEN_CACHE_DIR filled (make test-python)?")
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
