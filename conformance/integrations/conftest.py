"""The integration clients' suite: clients written for Ollama's and
text-embeddings-inference's APIs (and Chroma's OpenAI embedding function), each
against the real `embed-stack serve` on the tiny model, compared with raw
/v1/embeddings requests to the same server.

It shares conformance/python's helpers (starting the server, raw requests, vector
comparisons) but runs in a virtual environment of its own, .cache/venv-integrations
(`make test-integrations`): chromadb's dependencies conflict with that suite's
(kubernetes needs python-dateutil 3 or later, botocore one before 3).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import pytest  # noqa: E402

from helpers import Server  # noqa: E402


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()
