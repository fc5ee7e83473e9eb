"""The `openai` SDK's error classes and retries against the real server's refusals:
401 (--api-key), 404 (--strict-model), 413 (--max-body-bytes), 429 (admission,
--max-concurrent-requests) and 503 (the warm worker still loading). Retries are
proven on the server's side: its own request counts (GET /metrics) and the time the
SDK waited, which must be the Retry-After the server sent, not the SDK's own backoff
(0.375 to 0.5 s before its first retry)."""

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from helpers import Server, assert_same, post, raw_embed

KEY = "sk-python-suite"
BODY_LIMIT = 4096
HEADERS = {"Authorization": "Bearer " + KEY}

MSG_429 = ("The server is already handling its limit of 1 concurrent requests (--max-concurrent-requests); "
           "retry after 1s.")


@pytest.fixture(scope="module")
def guarded():
    """A server that refuses: one API key, its own model name only, 4 KiB bodies, one
    request at a time."""
    s = Server("--api-key", KEY, "--strict-model", "--max-body-bytes", str(BODY_LIMIT),
               "--max-concurrent-requests", "1", "--debug-vars", "--log-format", "json")
    yield s
    s.stop()


def client_for(s, **kw):
    return OpenAI(base_url=s.url + "/v1", api_key=KEY, **kw)


def served_model(s):
    req = urllib.request.Request(s.url + "/v1/models", headers=HEADERS)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["data"][0]["id"]


def debug_vars(s):
    req = urllib.request.Request(s.url + "/debug/vars", headers=HEADERS)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def wait_for(cond, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.005)
    pytest.fail(f"timed out waiting for {what}")


class HeldRequest:
    """A /v1/embeddings request held in flight: the warm worker is paused (SIGSTOP)
    before it is sent, so once admitted it holds one of the server's
    --max-concurrent-requests slots until finish() lets the worker go on (SIGCONT).
    (A slow body would not do: the server reads bodies before admission.)

    The pause is confirmed in /proc (state T) before the request is sent, since
    SIGSTOP takes effect only when the kernel next schedules the worker. A held
    request that ends while the worker is paused is not held: the failure then
    says how it ended, when, and what the server and the worker process were
    doing, instead of only that no request was seen in flight."""

    def __init__(self, s, model):
        self.worker = debug_vars(s)["warm_worker_pid"]
        os.kill(self.worker, signal.SIGSTOP)
        wait_for(lambda: proc_state(self.worker) == "T", f"worker {self.worker} to stop (SIGSTOP)", timeout=10.0)
        self.result = {}
        self.sent = time.monotonic()

        def send():
            self.result["status"] = post(s.url, "/v1/embeddings", {"model": model, "input": "held"}, HEADERS)[0]
            self.result["after_s"] = round(time.monotonic() - self.sent, 3)
            self.result["worker_state"] = proc_state(self.worker)

        self.thread = threading.Thread(target=send)
        self.thread.start()
        try:
            wait_for(lambda: "status" in self.result or debug_vars(s)["requests_in_flight"] == 1,
                     "the held request to be admitted")
            if "status" in self.result:
                pytest.fail(f"the held request ended while worker {self.worker} was paused: {self.result}; "
                            f"worker state now {proc_state(self.worker)}, /debug/vars {debug_vars(s)}\n{s.output()}")
        except BaseException:
            self.finish()
            raise

    def finish(self):
        """Lets the worker go on and returns the held request's status."""
        os.kill(self.worker, signal.SIGCONT)
        self.thread.join(60)
        return self.result.get("status")


def proc_state(pid):
    """The one-letter state of a process (/proc/PID/stat), "gone" once it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def check_error(err, cls, status, body):
    """err is exactly cls (not a subclass), with the status and the whole envelope."""
    assert type(err) is cls, f"{type(err).__name__}, want {cls.__name__}: {err}"
    assert err.status_code == status
    assert err.body == body, err.body
    assert err.message.startswith(f"Error code: {status} - ") and body["message"] in err.message, err.message


def test_authentication_error(guarded):
    before = guarded.requests(401)
    for key, code, message in [
        ("wrong", "invalid_api_key",
         "Incorrect API key provided. The server accepts only the keys it was started with (--api-key, --api-key-file)."),
    ]:
        c = OpenAI(base_url=guarded.url + "/v1", api_key=key)
        with pytest.raises(openai.AuthenticationError) as e:
            c.embeddings.create(model=served_model(guarded), input="a")
        check_error(e.value, openai.AuthenticationError, 401,
                    {"message": message, "type": "invalid_request_error", "param": None, "code": code})
    assert guarded.requests(401) == before + 1, "a 401 is not retried"


def test_not_found_error(guarded):
    with pytest.raises(openai.NotFoundError) as e:
        client_for(guarded).embeddings.create(model="text-embedding-3-small", input="a")
    check_error(e.value, openai.NotFoundError, 404, {
        "message": "The model `text-embedding-3-small` does not exist or you do not have access to it.",
        "type": "invalid_request_error", "param": "model", "code": "model_not_found"})


def test_request_too_large_is_an_api_status_error(guarded):
    before = guarded.requests(413)
    with pytest.raises(openai.APIStatusError) as e:
        client_for(guarded).embeddings.create(model=served_model(guarded), input="x" * BODY_LIMIT)
    # No subclass of APIStatusError stands for 413; the SDK does not retry it.
    check_error(e.value, openai.APIStatusError, 413, {
        "message": f"The request body is larger than the server's limit of {BODY_LIMIT} bytes (--max-body-bytes).",
        "type": "invalid_request_error", "param": None, "code": "request_too_large"})
    assert guarded.requests(413) == before + 1, "a 413 is not retried"


def test_rate_limit_error_without_retries(guarded):
    model = served_model(guarded)
    held = HeldRequest(guarded, model)
    try:
        with pytest.raises(openai.RateLimitError) as e:
            client_for(guarded, max_retries=0).embeddings.create(model=model, input="refused")
    finally:
        assert held.finish() == 200
    check_error(e.value, openai.RateLimitError, 429,
                {"message": MSG_429, "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"})
    assert e.value.response.headers["retry-after"] == "1"


def test_rate_limit_retry_waits_retry_after(server, guarded):
    """Default client (max_retries=2): the first attempt is refused while another
    request holds the only slot, released right after the refusal; the SDK waits the
    full Retry-After (1 s), not its own shorter backoff, and its one retry succeeds."""
    model = served_model(guarded)
    text = "retried after a 429"
    held = HeldRequest(guarded, model)
    refused, ok = guarded.requests(429), guarded.requests(200)
    released = {}

    def release():
        wait_for(lambda: guarded.requests(429) == refused + 1, "the SDK's first attempt to be refused")
        released["status"] = held.finish()

    t = threading.Thread(target=release)
    t.start()
    start = time.monotonic()
    try:
        res = client_for(guarded).embeddings.create(model=model, input=text)
    finally:
        t.join()
    end = time.monotonic()
    assert released["status"] == 200
    assert guarded.requests(429) == refused + 1, "one refusal, so one retry"
    assert guarded.requests(200) == ok + 2, "the held request and the retry"
    assert end - start < 5.0, f"{end - start:.3f}s"
    # The retry arrived Retry-After (1 s) after the refusal.
    attempts = [r for r in log_records(guarded) if r["route"] == "/v1/embeddings"]
    refusal = [r for r in attempts if r["status"] == 429][-1]
    retry = [r for r in attempts if r["status"] == 200 and r["time"] > refusal["time"]]
    assert len(retry) == 1, attempts
    gap = retry[0]["time"] - refusal["time"]
    assert 1.0 <= gap < 1.5, f"the retry came {gap:.3f}s after the 429 (Retry-After: 1)"
    # When the held request finishes is not asserted: the worker resumes from SIGSTOP
    # when the machine's load lets it (once almost a second later). One refusal and a
    # 200 retry already show the retry came once the slot was free, and the gap above
    # rules out the SDK's own backoff (0.375 to 0.5 s).
    want, _ = raw_embed(server.url, {"input": text})
    assert_same(res.data[0].embedding, want[0], "the retried request")


def child_pid(parent, timeout=30.0):
    """The worker child process of parent (Linux /proc: its command line's first argument is
    "worker"), waiting for it to appear. Other children come and go first: with a backend
    folder (GPU backends or CPU kernel variants in lib/embed-stack) serve asks a short-lived
    `embed-stack devices --json` child for the device before it starts the warm worker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) != parent:
                    continue
                argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue  # gone meanwhile
            if len(argv) > 1 and argv[1] == b"worker":
                return int(stat.parent.name)
        time.sleep(0.002)
    pytest.fail(f"process {parent} started no worker child in {timeout}s")


def ready_status(s):
    try:
        with urllib.request.urlopen(s.url + "/ready", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_unavailable_while_loading_then_retry(server):
    """While the warm worker loads, the server answers 503 with Retry-After. With no
    retries the SDK raises InternalServerError; with retries it waits Retry-After
    between attempts (the server's log says when each arrived) and gets the vector once
    the worker is up. The worker is paused (SIGSTOP) as soon as it is started, so that
    the load lasts as long as the test needs, then let go (SIGCONT)."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs Linux /proc to find the worker process")
    s = Server("--log-format", "json", ready=False)
    worker = child_pid(s.proc.pid)
    os.kill(worker, signal.SIGSTOP)
    try:
        s.wait_listening()
        assert ready_status(s) == 503, "the worker was ready before it could be paused"
        text = "sent while the worker loads"
        with pytest.raises(openai.InternalServerError) as e:
            OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0).embeddings.create(model="m", input=text)
        err = e.value
        ra = err.response.headers["retry-after"]
        check_error(err, openai.InternalServerError, 503, {
            "message": f"The embedding worker is not ready (starting or restarting); retry after {ra}s.",
            "type": "server_error", "param": None, "code": "worker_unavailable"})
        assert ra == "1", ra

        got = {}

        def retrying():
            got["res"] = OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=10).embeddings.create(
                model="m", input=text)

        t = threading.Thread(target=retrying)
        t.start()
        # Three refusals of the retrying client (two waits), then the worker goes on.
        wait_for(lambda: s.requests(503) == 4, "three 503s to the retrying client")
        os.kill(worker, signal.SIGCONT)
        t.join(60)
        assert "res" in got, "the retrying client got no vector"
    finally:
        os.kill(worker, signal.SIGCONT)
    try:
        attempts = [r for r in log_records(s) if r.get("route") == "/v1/embeddings"]
        statuses = [r["status"] for r in attempts]
        assert statuses[:4] == [503] * 4 and statuses[-1] == 200 and set(statuses[4:-1]) <= {503}, statuses
        assert s.requests(503) == len(statuses) - 1 and s.requests(200) == 1
        # Each retry came Retry-After (1 s) after the refusal before it; the SDK's own
        # backoff would have been 0.375-0.5 s, then 0.75-1 s, then 1.5-2 s.
        times = [r["time"] for r in attempts]
        for i in range(2, len(times)):
            gap = times[i] - times[i - 1]
            assert 1.0 <= gap < 1.5, f"attempt {i} came {gap:.3f}s after the previous 503 (Retry-After 1): {statuses}"
        want, _ = raw_embed(server.url, {"input": text})
        assert_same(got["res"].data[0].embedding, want[0], "the retried request")
    finally:
        s.stop()


def log_records(s):
    """The server's JSON log lines of requests, each with the time it arrived in
    seconds (a line is written when the answer is, duration_ms after the arrival)."""
    out = []
    for line in s.output().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "status" in r and "route" in r:
            r["time"] = datetime.fromisoformat(r["time"]).timestamp() - r["duration_ms"] / 1000
            out.append(r)
    return out
