"""The ```python blocks of README.md and docs/clients.md that use the integration
clients, run as written (only their address changed) and checked as
conformance/python/test_snippets.py checks the others: each prints every
document's similarity to a query, which must be that of raw requests."""

import pytest

import test_snippets as base
from helpers import ROOT

BLOCKS = base.blocks(integrations=True)


def test_every_client_has_a_snippet():
    text = "\n".join(p.values[2] for p in BLOCKS)
    for module in ("import ollama", "from langchain_ollama", "from llama_index.embeddings.ollama", "from chromadb",
                   "from huggingface_hub", "from haystack_integrations"):
        assert module in text, f"no snippet of docs/clients.md uses {module}"


@pytest.mark.parametrize("page,line,code", BLOCKS)
def test_integration_snippet(server, page, line, code):
    assert "print(" in code, f"{page}:{line}: a snippet here prints its ranking"
    out, _ = base.run(code, page, line, server.url)
    base.check_ranking(server.url, out)
    assert (ROOT / page).exists()
