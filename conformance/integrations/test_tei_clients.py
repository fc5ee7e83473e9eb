"""Clients of text-embeddings-inference's API with their defaults:
huggingface_hub's InferenceClient.feature_extraction (which posts to the base URL
itself) and Haystack's HuggingFaceAPI embedders with api_type
text_embeddings_inference. Each must get the vectors of /v1/embeddings, or, where
the client asks for unnormalised vectors (Haystack's normalize=False default), the
pooled vectors that normalise to them."""

import numpy as np
import pytest

from helpers import float32_bits, model_id, post, raw_vectors

TEXTS = ["The capital of China is Beijing.", "Gravity is a force that attracts two bodies towards each other.", "naïve café ☕"]
QUERY = "What is the capital of China?"


def same_bits(got, want, what):
    assert len(got) == len(want), f"{what}: {len(got)} vectors, want {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert float32_bits(g) == float32_bits(w), f"{what}: vector {i} differs from /v1/embeddings'"


def tei_raw(url, texts):
    """The unnormalised vectors of TEI's /embed (normalize false)."""
    status, _, body = post(url, "/embed", {"inputs": texts, "normalize": False})
    assert status == 200, body
    return [np.array(v, dtype=np.float64) for v in body]


def test_huggingface_hub_feature_extraction(server):
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=server.url)
    got = client.feature_extraction(TEXTS)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), len(raw_vectors(server.url, TEXTS[:1])[0]))
    same_bits(list(got), raw_vectors(server.url, TEXTS), "feature_extraction")
    one = client.feature_extraction(QUERY, prompt_name="query", dimensions=32)
    same_bits(list(one), raw_vectors(server.url, [QUERY], input_type="query", dimensions=32), "feature_extraction prompt_name=query dimensions=32")
    raw = client.feature_extraction(TEXTS, normalize=False)
    same_bits(list(raw), tei_raw(server.url, TEXTS), "feature_extraction normalize=False")


def test_huggingface_hub_errors(server):
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    client = InferenceClient(base_url=server.url)
    with pytest.raises(HfHubHTTPError) as e:
        client.feature_extraction(TEXTS, prompt_name="search")
    assert e.value.response.status_code == 422
    assert e.value.response.json() == {
        "error": "Input validation error: `default-prompt-name` is set to `search` but it was not found in the Sentence Transformers prompts. Available prompts: [\"query\", \"document\"]",
        "error_type": "Validation"}


def test_haystack_tei_embedders(server):
    from haystack import Document
    from haystack_integrations.common.huggingface_api.utils import HFEmbeddingAPIType
    from haystack_integrations.components.embedders.huggingface_api import (
        HuggingFaceAPIDocumentEmbedder, HuggingFaceAPITextEmbedder)

    params = {"url": server.url}
    tei = HFEmbeddingAPIType.TEXT_EMBEDDINGS_INFERENCE
    # Haystack's defaults: truncate=True, normalize=False, so the vectors are the
    # pooled ones, unnormalised.
    text = HuggingFaceAPITextEmbedder(api_type=tei, api_params=params)
    same_bits([text.run(text=TEXTS[0])["embedding"]], tei_raw(server.url, TEXTS[:1]), "HuggingFaceAPITextEmbedder (defaults)")
    docs = HuggingFaceAPIDocumentEmbedder(api_type=tei, api_params=params)
    out = docs.run(documents=[Document(content=t) for t in TEXTS])["documents"]
    same_bits([d.embedding for d in out], tei_raw(server.url, TEXTS), "HuggingFaceAPIDocumentEmbedder (defaults)")
    # normalize=True gives /v1/embeddings' unit vectors; the ":query"-less text
    # embedder embeds a document, so a query needs the instruction as prefix.
    unit = HuggingFaceAPIDocumentEmbedder(api_type=tei, api_params=params, normalize=True)
    same_bits([d.embedding for d in unit.run(documents=[Document(content=t) for t in TEXTS])["documents"]],
              raw_vectors(server.url, TEXTS), "HuggingFaceAPIDocumentEmbedder normalize=True")
    task = "Given a web search query, retrieve relevant passages that answer the query"
    query = HuggingFaceAPITextEmbedder(api_type=tei, api_params=params, normalize=True, prefix=f"Instruct: {task}\nQuery:")
    same_bits([query.run(text=QUERY)["embedding"]], raw_vectors(server.url, [QUERY], input_type="query"),
              "HuggingFaceAPITextEmbedder with the query prefix")
    assert model_id(server.url)
