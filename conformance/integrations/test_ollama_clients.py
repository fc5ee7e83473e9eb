"""Clients of Ollama's API with their defaults: the ollama library, LangChain's
OllamaEmbeddings, LlamaIndex's OllamaEmbedding and Chroma's
OllamaEmbeddingFunction. Each must get the vectors of /v1/embeddings for the same
texts, bit for bit (Ollama's API sends text; a ":query" model suffix makes queries),
and Ollama's error objects for bad input."""

import numpy as np
import pytest

from helpers import float32_bits, model_id, raw_vectors

TEXTS = ["The capital of China is Beijing.", "Gravity is a force that attracts two bodies towards each other.", "naïve café ☕"]
QUERY = "What is the capital of China?"


def same_bits(got, want, what):
    assert len(got) == len(want), f"{what}: {len(got)} vectors, want {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert float32_bits(g) == float32_bits(w), f"{what}: vector {i} differs from /v1/embeddings'"


def test_ollama_library(server):
    import ollama

    client = ollama.Client(host=server.url)
    model = model_id(server.url)
    resp = client.embed(model=model, input=TEXTS)
    same_bits(resp.embeddings, raw_vectors(server.url, TEXTS), "Client.embed")
    assert resp.model == model and resp.prompt_eval_count == sum(
        raw_embed_usage(server, t) for t in TEXTS) and resp.total_duration > 0 and resp.load_duration > 0
    one = client.embed(model=model, input=TEXTS[0], dimensions=32)
    same_bits(one.embeddings, raw_vectors(server.url, TEXTS[:1], dimensions=32), "Client.embed dimensions=32")
    legacy = client.embeddings(model=model, prompt=TEXTS[1])
    same_bits([legacy.embedding], raw_vectors(server.url, TEXTS[1:2]), "Client.embeddings (legacy)")
    query = client.embed(model=f"{model}:query", input=QUERY)
    same_bits(query.embeddings, raw_vectors(server.url, [QUERY], input_type="query"), "Client.embed model:query")

    listed = client.list()
    assert [m.model for m in listed.models] == [f"{model}:latest", f"{model}:query", f"{model}:document"], listed
    # /api/ps names a loaded model as /api/tags does, so that UIs can match the two.
    running = client.ps()
    assert [m.model for m in running.models] == [f"{model}:latest"], running
    assert running.models[0].expires_at is not None, running
    assert listed.models[0].details.family == "qwen3" and listed.models[0].details.format == "gguf"
    shown = client.show(model)
    assert shown.capabilities == ["embedding"] and shown.modelinfo["general.architecture"] == "qwen3"
    assert shown.modelinfo["qwen3.embedding_length"] == len(resp.embeddings[0])


def raw_embed_usage(server, text):
    from helpers import raw_embed

    return raw_embed(server.url, {"input": [text]})[1]["usage"]["prompt_tokens"]


def test_ollama_library_errors(server):
    import ollama

    client = ollama.Client(host=server.url)
    with pytest.raises(ollama.ResponseError) as e:
        client.embed(model="m", input="a", dimensions=8)
    assert (e.value.status_code, e.value.error) == (400, "'dimensions' must be between 32 and 64 for this model; got 8.")
    with pytest.raises(ollama.ResponseError) as e:
        client.embed(model="m", input=["a", ""])
    assert (e.value.status_code, e.value.error) == (400, "input 1 is an empty string; every input must hold text.")
    strict = type(server)("--strict-model")
    try:
        with pytest.raises(ollama.ResponseError) as e:
            ollama.Client(host=strict.url).embed(model="nomic-embed-text", input="a")
        assert (e.value.status_code, e.value.error) == (404, "model 'nomic-embed-text' not found")
    finally:
        strict.stop()


def test_langchain_ollama(server):
    from langchain_ollama import OllamaEmbeddings

    model = model_id(server.url)
    documents = OllamaEmbeddings(model=model, base_url=server.url, validate_model_on_init=True)
    # validate_model_on_init looks the name up in /api/tags, :query tag included.
    queries = OllamaEmbeddings(model=f"{model}:query", base_url=server.url, validate_model_on_init=True)
    same_bits(documents.embed_documents(TEXTS), raw_vectors(server.url, TEXTS), "embed_documents")
    same_bits([queries.embed_query(QUERY)], raw_vectors(server.url, [QUERY], input_type="query"), "embed_query (:query model)")
    # A model that is not served is refused at construction: /api/tags lists the models.
    strict = type(server)("--strict-model")
    try:
        with pytest.raises(ValueError):
            OllamaEmbeddings(model="nomic-embed-text", base_url=strict.url, validate_model_on_init=True)
    finally:
        strict.stop()


def test_llamaindex_ollama(server):
    from llama_index.embeddings.ollama import OllamaEmbedding

    model = model_id(server.url)
    documents = OllamaEmbedding(model_name=model, base_url=server.url)
    queries = OllamaEmbedding(model_name=f"{model}:query", base_url=server.url)
    same_bits(documents.get_text_embedding_batch(TEXTS), raw_vectors(server.url, TEXTS), "get_text_embedding_batch")
    same_bits([queries.get_query_embedding(QUERY)], raw_vectors(server.url, [QUERY], input_type="query"), "get_query_embedding")


def test_chroma_ollama_embedding_function(server):
    from chromadb.utils.embedding_functions import OllamaEmbeddingFunction

    ef = OllamaEmbeddingFunction(url=server.url, model_name=model_id(server.url))
    got = ef(TEXTS)
    assert all(v.dtype == np.float32 for v in got)
    same_bits(got, raw_vectors(server.url, TEXTS), "OllamaEmbeddingFunction")
    # The URL form of older Chroma versions, ending in /api/embeddings, still works.
    legacy = OllamaEmbeddingFunction(url=server.url + "/api/embeddings", model_name="any")
    same_bits(legacy(TEXTS[:1]), raw_vectors(server.url, TEXTS[:1]), "OllamaEmbeddingFunction(url=.../api/embeddings)")


def test_chroma_openai_embedding_function(server):
    from chromadb.utils.embedding_functions import OpenAIEmbeddingFunction

    ef = OpenAIEmbeddingFunction(api_key="unused", api_base=server.url + "/v1", model_name=model_id(server.url))
    same_bits(ef(TEXTS), raw_vectors(server.url, TEXTS), "OpenAIEmbeddingFunction")
