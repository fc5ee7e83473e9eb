"""Fixtures of the Python client suite; helpers.py says what the suite is and which
environment it reads."""

import pytest

from helpers import Server


@pytest.fixture(scope="session")
def server():
    """The server most tests share, with default settings."""
    s = Server()
    yield s
    s.stop()
