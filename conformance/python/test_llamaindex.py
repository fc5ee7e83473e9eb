"""LlamaIndex's OpenAIEmbedding (llama-index-embeddings-openai) pointed at the server
with api_base. Its model must be one of OpenAI's names (it maps the name to
"engines"), so the default text-embedding-ada-002 is used, which the server accepts
and embeds as a document; queries are marked with the X-Embedding-Input-Type header
through default_headers. LlamaIndex replaces newlines by spaces before sending."""

from llama_index.embeddings.openai import OpenAIEmbedding

from helpers import assert_same, cosine, raw_vectors

DOCS = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other.",
    "Llamas live in the Andes\nand eat grass.",
]
QUERY = "What is the capital of China?"


def test_openai_embedding_query_and_documents(server):
    api_base = server.url + "/v1"
    documents = OpenAIEmbedding(api_base=api_base, api_key="unused")
    queries = OpenAIEmbedding(api_base=api_base, api_key="unused",
                              default_headers={"X-Embedding-Input-Type": "query"})
    d = documents.get_text_embedding_batch(DOCS)
    q = queries.get_query_embedding(QUERY)
    q_plain = documents.get_query_embedding(QUERY)

    sent = [t.replace("\n", " ") for t in DOCS]
    want_d = raw_vectors(server.url, sent, input_type="document")
    want_q = raw_vectors(server.url, [QUERY], input_type="query")[0]
    want_plain = raw_vectors(server.url, [QUERY], input_type="document")[0]
    assert len(d) == len(DOCS)
    for i, v in enumerate(d):
        assert_same(v, want_d[i], f"document {i}")
    assert_same(q, want_q, "query (X-Embedding-Input-Type: query)")
    assert_same(q_plain, want_plain, "query without the header: a document")
    assert cosine(q, q_plain) < 0.999


def test_openai_embedding_dimensions(server):
    e = OpenAIEmbedding(api_base=server.url + "/v1", api_key="unused", model="text-embedding-3-small", dimensions=64)
    got = e.get_text_embedding("sixty-four components")
    assert len(got) == 64
    assert_same(got, raw_vectors(server.url, ["sixty-four components"], dimensions=64)[0], "dimensions 64")
