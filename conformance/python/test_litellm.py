"""LiteLLM's embedding() with an "openai/..." model and api_base, as LiteLLM documents
for OpenAI-compatible servers. It strips the "openai/" prefix and sends the rest as
the model name, so the ":query" suffix marks queries."""

import os

from helpers import assert_same, cosine, raw_vectors

DOCS = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other.",
    "Copper conducts electricity.",
]
QUERY = "What is the capital of China?"


def import_litellm():
    # LiteLLM points TIKTOKEN_CACHE_DIR at its own copy of the tiktoken files when it
    # is imported, unless CUSTOM_TIKTOKEN_CACHE_DIR names one: keep the suite's.
    os.environ.setdefault("CUSTOM_TIKTOKEN_CACHE_DIR", os.environ["TIKTOKEN_CACHE_DIR"])
    import litellm
    return litellm


def test_embedding_query_and_documents(server):
    litellm = import_litellm()
    api_base = server.url + "/v1"
    d = litellm.embedding(model="openai/qwen3-embedding-0.6b", input=DOCS, api_base=api_base, api_key="unused")
    q = litellm.embedding(model="openai/qwen3-embedding-0.6b:query", input=[QUERY], api_base=api_base, api_key="unused")
    assert [x["index"] for x in d.data] == [0, 1, 2]
    want_d = raw_vectors(server.url, DOCS, input_type="document")
    want_q = raw_vectors(server.url, [QUERY], input_type="query")[0]
    for i, x in enumerate(d.data):
        assert_same(x["embedding"], want_d[i], f"document {i}")
    assert_same(q.data[0]["embedding"], want_q, "query (:query suffix)")
    assert cosine(q.data[0]["embedding"], raw_vectors(server.url, [QUERY])[0]) < 0.999
    assert d.model == "qwen3-embedding-0.6b"
    assert d.usage.prompt_tokens > len(DOCS)
