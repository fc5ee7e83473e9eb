"""Every ```python block of README.md and docs/clients.md, run as it is written.

The blocks are read from the Markdown when the tests run (no copies that could drift)
and executed in this process with exec(), their output captured. The only change made
to a block is its address: every snippet must use the default one,
http://127.0.0.1:8080 (what `make run` serves), which is replaced by the test
server's. Then what the snippet printed or left in its variables is compared with raw
requests for the same texts:

- the snippets that print (those of docs/clients.md with a file under docs/clients/)
  print each document's similarity to a query, with 4 decimals: it must be that of
  the query embedded as a query;
- the others leave their results or clients in variables (docs/query,
  documents/queries), compared with the raw vectors.

A block this file has no check for fails, so that a new snippet gets one.
"""

import contextlib
import io
import re

import pytest

from helpers import DEFAULT_URL, ROOT, assert_same, raw_vectors

PAGES = ["README.md", "docs/clients.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)

# Printed with 4 decimals; float32 sums differ from float64 ones in the 6th or 7th.
PRINTED_TOL = 1.5e-4

# The ranking snippets of docs/clients.md all embed these.
RANK_DOCS = ["The capital of China is Beijing.", "Gravity is a force that attracts two bodies towards each other."]
RANK_QUERY = "What is the capital of China?"


# Blocks that import these run in the integration clients' suite
# (conformance/integrations), whose virtual environment holds them: their
# dependencies conflict with this suite's. It runs them with this file's checks.
INTEGRATION_IMPORTS = re.compile(
    r"^\s*(?:from|import)\s+(?:ollama|langchain_ollama|llama_index\.embeddings\.ollama|chromadb|haystack|haystack_integrations|huggingface_hub)\b", re.M)


def blocks(integrations=False):
    """The ```python blocks of PAGES: this suite's, or with integrations=True the
    integration clients' suite's."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        page_blocks = list(BLOCK.finditer(text))
        # Every ```python fence is a block the pattern found (none malformed).
        assert len(page_blocks) == text.count("```python\n") > 0, page
        for m in page_blocks:
            if bool(INTEGRATION_IMPORTS.search(m.group(1))) != integrations:
                continue
            line = text.count("\n", 0, m.start(1)) + 1
            found.append(pytest.param(page, line, m.group(1), id=f"{page}:{line}"))
    return found


def run(code, page, line, url):
    assert DEFAULT_URL in code, f"{page}:{line} does not use {DEFAULT_URL}"
    code = code.replace(DEFAULT_URL, url)
    # Padded so that a traceback names the page's own line numbers.
    compiled = compile("\n" * (line - 1) + code, str(ROOT / page), "exec")
    ns = {"__name__": "__snippet__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compiled, ns)
    return out.getvalue(), ns


def check_ranking(url, out):
    d = raw_vectors(url, RANK_DOCS, input_type="document")
    q = raw_vectors(url, [RANK_QUERY], input_type="query")[0]
    q_as_doc = raw_vectors(url, [RANK_QUERY], input_type="document")[0]
    lines = out.strip().split("\n")
    assert len(lines) == len(RANK_DOCS), f"printed:\n{out}"
    for i, line in enumerate(lines):
        m = re.fullmatch(r"(-?\d+\.\d{4}) (.*)", line)
        assert m and m.group(2) == RANK_DOCS[i], f"line {i}: {line!r}"
        got, want, as_doc = float(m.group(1)), float(q @ d[i]), float(q_as_doc @ d[i])
        assert abs(got - want) <= PRINTED_TOL, f"doc {i}: printed {got}, raw requests give {want}"
        if abs(want - as_doc) > 10 * PRINTED_TOL:
            assert abs(got - as_doc) > PRINTED_TOL, f"doc {i}: {got} is the similarity of the query embedded as a document"


def check_readme_openai(url, code, ns):
    instruction = re.search(r'"instruction": "([^"]+)"', code).group(1)
    docs, query = ns["docs"], ns["query"]
    assert_same(docs.data[0].embedding, raw_vectors(url, ["A document."], input_type="document")[0], "docs")
    want = raw_vectors(url, ["what is a document?"], input_type="query", instruction=instruction)[0]
    assert_same(query.data[0].embedding, want, "query with the snippet's instruction")


def check_llamaindex_objects(url, ns):
    """A snippet that only builds LlamaIndex OpenAIEmbedding objects: they must embed
    as their names say."""
    d = ns["documents"].get_text_embedding(RANK_DOCS[0])
    q = ns["queries"].get_query_embedding(RANK_QUERY)
    assert_same(d, raw_vectors(url, [RANK_DOCS[0]], input_type="document")[0], "documents")
    assert_same(q, raw_vectors(url, [RANK_QUERY], input_type="query")[0], "queries")


@pytest.mark.parametrize("page,line,code", blocks())
def test_python_snippet(server, page, line, code):
    out, ns = run(code, page, line, server.url)
    if "print(" in code:
        check_ranking(server.url, out)
    elif "from openai import" in code:
        check_readme_openai(server.url, code, ns)
    elif "from llama_index.embeddings.openai import" in code:
        check_llamaindex_objects(server.url, ns)
    else:
        pytest.fail(f"{page}:{line}: no check for this snippet; add one to {__file__}")
