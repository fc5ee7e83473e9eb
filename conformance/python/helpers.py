"""Helpers of the Python client suite (see conftest.py): starting the real server,
raw requests, vector comparisons.

The Python client suite: the clients Python users run (openai, langchain-openai,
llama-index, litellm) and the Python snippets of README.md and docs/clients.md, each
against the real `embed-stack serve` on the tiny llama.cpp model, compared with raw
HTTP requests (urllib, encoding_format float) to the same server.

Environment, as for the Go and node suites:

    EMBED_STACK_BIN          the binary (default <repo>/bin/embed-stack)
    EMBED_STACK_MODEL        the GGUF (default <repo>/models/tiny.gguf)
    EMBED_STACK_REQUIRE_E2E  "1" turns a missing binary or model into a failure
    TIKTOKEN_CACHE_DIR       where tiktoken finds cl100k_base (default <repo>/.cache/tiktoken,
                             which `make test-python` fills from the Go vocabulary:
                             embed-stack tiktoken-cache); nothing is downloaded

`make test-python` creates the virtual environment and runs this suite.
"""

import base64
import json
import math
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("EMBED_STACK_BIN") or ROOT / "bin" / "embed-stack")
MODEL = Path(os.environ.get("EMBED_STACK_MODEL") or ROOT / "models" / "tiny.gguf")

# The address every documented snippet uses; tests point it at their own server.
DEFAULT_URL = "http://127.0.0.1:8080"

# serve converts a model's F16 matrices to BF16 at load into --weights-cache (under
# --weights auto on a CPU with AVX-512 BF16), by default the user's
# ~/.cache/huggingface/embed-stack/weights; the servers of this suite convert into a
# folder of their own instead, removed when the interpreter exits, as the Go suites'
# do (internal/e2e's Run).
WEIGHTS_CACHE = tempfile.TemporaryDirectory(prefix="embed-stack-test-weights-")

READY_TIMEOUT = 90.0
STOP_TIMEOUT = 15.0

# Per component: an SDK's vector (base64 float32) against the raw float response.
SAME_TOL = 1e-6
NORM_TOL = 1e-5

# cl100k_base comes from the repository, never from the network: tiktoken reads
# TIKTOKEN_CACHE_DIR/<sha1 of its download URL> and checks its sha256. Set before any
# client library is imported (LangChain loads tiktoken lazily, on first use).
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT / ".cache" / "tiktoken"))
CL100K_CACHE_KEY = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"  # tokenizer.Cl100kTiktokenCacheKey
# LiteLLM fetches its model price list from the network at import unless told to use
# the copy it ships; an air-gapped user sets the same.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def require(reason):
    """Skips, or fails when EMBED_STACK_REQUIRE_E2E=1 says everything must run."""
    if os.environ.get("EMBED_STACK_REQUIRE_E2E") == "1":
        pytest.fail(f"EMBED_STACK_REQUIRE_E2E=1 and {reason}")
    pytest.skip(reason)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `embed-stack serve` on a free loopback port, its output in a file."""

    def __init__(self, *flags, ready=True):
        missing = [str(p) for p in (BIN, MODEL) if not p.exists()]
        if missing:
            require(f"missing {', '.join(missing)}: run `make build models` first")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        # One llama.cpp thread, as the Go and node suites use: test machines are
        # shared, and threads that wait for each other at every node are slower there.
        args = [str(BIN), "serve", "--model", str(MODEL), "--addr", f"127.0.0.1:{self.port}", "--threads", "1", *flags]
        env = {**os.environ, "EMBED_STACK_WEIGHTS_CACHE": WEIGHTS_CACHE.name}
        self.proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if ready:
            self.wait_ready()

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-16384:]

    def wait_listening(self, timeout=READY_TIMEOUT):
        """Waits until GET /health answers 200 (HTTP is up; the worker may still load)."""
        self._wait("/health", timeout)

    def wait_ready(self, timeout=READY_TIMEOUT):
        self._wait("/ready", timeout)

    def _wait(self, path, timeout):
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"embed-stack serve exited {self.proc.returncode} before {path} was 200\n{self.output()}")
            try:
                with urllib.request.urlopen(self.url + path, timeout=2) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError as e:
                last = f"status {e.code}"
            except OSError as e:
                last = str(e)
            time.sleep(0.02)
        self.proc.kill()
        pytest.fail(f"GET {path} not 200 after {timeout}s (last: {last})\n{self.output()}")

    def stop(self):
        """SIGTERM; the server must exit 0 within STOP_TIMEOUT."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"embed-stack serve still running {STOP_TIMEOUT}s after SIGTERM\n{self.output()}")
        code = self.proc.returncode
        self.log.close()
        assert code == 0, f"embed-stack serve exited {code} after SIGTERM"

    def metric(self, name, **labels):
        """The sum of the Prometheus series name of GET /metrics whose labels
        include labels, as PromQL's sum() over the others (0 when none): a
        request refused before its model is known has no model label, and
        those after it one (issue 17)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            m = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
            if not m or m.group(1) != name:
                continue
            got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
            if all(got.get(k) == v for k, v in labels.items()):
                total += float(m.group(3))
        return total

    def requests(self, status, route="/v1/embeddings"):
        """Requests the server answered on route with status (its own count)."""
        return int(self.metric("embed_stack_http_requests_total", route=route, code=str(status)))


def post(url, path, body, headers=None):
    """POSTs JSON (or raw bytes) and returns (status, headers, parsed JSON)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def raw_embed(url, body, headers=None):
    """The float vectors of a raw /v1/embeddings request, as float64 arrays, and the
    whole response."""
    status, _, resp = post(url, "/v1/embeddings", {"model": "m", "encoding_format": "float", **body}, headers)
    assert status == 200, f"raw request {json.dumps(body)[:200]}: {status} {resp}"
    return [np.array(d["embedding"], dtype=np.float64) for d in resp["data"]], resp


def raw_vectors(url, texts, **fields):
    """raw_embed for texts, in requests of at most 1000 inputs."""
    out = []
    for i in range(0, len(texts), 1000):
        out.extend(raw_embed(url, {"input": texts[i:i + 1000], **fields})[0])
    return out


def cosine(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_same(got, want, what, tol=SAME_TOL):
    """got (a client's vector) equals want (the raw float one) within tol per
    component, and has unit norm."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: {got.shape[0]} components, want {want.shape[0]}"
    d = float(np.max(np.abs(got - want)))
    assert d <= tol, f"{what}: max |Δ| {d} > {tol}"
    n = float(np.linalg.norm(got))
    assert abs(n - 1) <= NORM_TOL, f"{what}: norm {n}"


def float32_bits(v):
    """A vector as float32 bytes: two vectors with equal bits are the same float32s."""
    return np.asarray(v, dtype=np.float32).tobytes()


def decode_base64(s):
    return np.frombuffer(base64.b64decode(s), dtype="<f4").astype(np.float64)


def model_id(url):
    with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
        return json.loads(r.read())["data"][0]["id"]
