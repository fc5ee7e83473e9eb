"""Rerank through the Cohere Python SDK against embed-stack (conformance/cohere_test.go).

Usage: rerank.py BASE_URL. It calls ClientV2.rerank (POST /v2/rerank) and the v1
Client.rerank with return_documents (POST /v1/rerank) on the same query and documents,
checks what the SDK parsed, and prints both results as JSON for the Go test to compare
with the server's own answer.
"""
import json
import sys

import cohere

base = sys.argv[1]
query = "What is the capital of China?"
docs = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other.",
    "Rivers, mountains and the weather of the north.",
]

v2 = cohere.ClientV2(api_key="unused", base_url=base, timeout=60)
r2 = v2.rerank(model="qwen3-reranker", query=query, documents=docs, top_n=2)
assert len(r2.results) == 2, r2
assert r2.results[0].relevance_score >= r2.results[1].relevance_score, r2

v1 = cohere.Client(api_key="unused", base_url=base, timeout=60)
r1 = v1.rerank(model="qwen3-reranker", query=query, documents=docs, return_documents=True)
assert len(r1.results) == 3, r1
for res in r1.results:
    assert res.document is not None and res.document.text == docs[res.index], res

print(json.dumps({
    "v2": [[r.index, r.relevance_score] for r in r2.results],
    "v1": [[r.index, r.relevance_score, r.document.text] for r in r1.results],
}))
