#!/usr/bin/env python3
"""Cross-check two embed-stack workers: mlx-embed-server against the llama.cpp one.

Starts both workers the way `embed-stack serve` does (--socket in a private 0700
directory, stdin a pipe), waits for GET /health to say ready, then:

  - protocol: /health fields and pid, 404/405, keep-alive, traceparent, and the exact
    400 answers of the protocol (empty, too long, negative or out-of-vocabulary ids,
    malformed JSON), noting where the llama.cpp worker answers differently;
  - numerics: the same token sequences (lengths around every bucket edge) sent to
    both; each pair of vectors must have cosine >= --min-cosine (0.999 by default, for
    F16 MLX against the F16 GGUF); a batch answered by the MLX worker must match its
    one-by-one answers and keep the input order;
  - lifecycle: closing stdin stops the worker with status 0 and removes its socket.

Prints one line per check and a closing "N passed, N failed" line; exits 1 on any
failure. Python 3.9+, standard library only.

Example (from the repository root, after `make build` and building mlx-embed-server):

  python3 mlx-embed-server/scripts/crosscheck.py \\
    --mlx-cmd "mlx-embed-server/.xcodebuild/Build/Products/Release/mlx-embed-server --model models/Qwen3-Embedding-0.6B" \\
    --llama-cmd "bin/embed-stack worker --model models/Qwen3-Embedding-0.6B-f16.gguf"
"""

import argparse
import http.client
import json
import math
import os
import random
import shlex
import socket
import subprocess
import sys
import tempfile
import time

EOS = 151643  # <|endoftext|>, which the server appends to every input


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket; the connection is reused between requests."""

    def __init__(self, path, timeout):
        super().__init__("worker", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Worker:
    def __init__(self, name, cmd, directory, timeout):
        self.name = name
        self.socket = os.path.join(directory, name + ".sock")
        self.log_path = os.path.join(directory, name + ".log")
        self.log = open(self.log_path, "wb")
        argv = shlex.split(cmd) + ["--socket", self.socket]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT)
        self.conn = UnixHTTPConnection(self.socket, timeout)
        self.health = None

    def tail(self, n=4000):
        with open(self.log_path, "rb") as f:
            return f.read()[-n:].decode("utf-8", "replace")

    def call(self, method, path, body=None, headers=None):
        """Returns (status, headers, parsed JSON body or raw text)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body, separators=(",", ":"))
        self.conn.request(method, path, body=body, headers=headers or {})
        r = self.conn.getresponse()
        data = r.read()
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = data.decode("utf-8", "replace")
        return r.status, {k.lower(): v for k, v in r.getheaders()}, parsed

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} while loading:\n{self.tail()}")
            if os.path.exists(self.socket):
                try:
                    status, _, h = self.call("GET", "/health")
                    if status == 200 and h.get("status") == "ready":
                        self.health = h
                        return
                except (OSError, http.client.HTTPException):
                    self.conn.close()
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout}s:\n{self.tail()}")

    def embed(self, seqs):
        status, _, body = self.call("POST", "/embed", {"tokens": seqs})
        if status != 200:
            raise RuntimeError(f"{self.name} answered {status}: {body}")
        return body["embeddings"]

    def stop_by_stdin(self, timeout=15):
        self.conn.close()
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else float("nan")


class Report:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, name, detail=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}" + (f"  ({detail})" if detail else ""))
        else:
            self.failed += 1
            print(f"FAIL {name}" + (f": {detail}" if detail else ""))
        sys.stdout.flush()


def sequences(rng, max_tokens, vocab_limit):
    """Token sequences ending in EOS, with lengths on both sides of each default
    bucket edge (256, 1024, 8192), capped at max_tokens."""
    lengths = [1, 2, 17, 255, 256, 257, 1000, 1024, 1025, 3000, 8191, 8192]
    out = []
    for n in lengths:
        if n > max_tokens:
            continue
        out.append([rng.randrange(0, vocab_limit) for _ in range(n - 1)] + [EOS])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mlx-cmd", required=True, help="command starting mlx-embed-server, without --socket")
    ap.add_argument("--llama-cmd", required=True, help="command starting `embed-stack worker`, without --socket")
    ap.add_argument("--min-cosine", type=float, default=0.999, help="least cosine between the two workers' vectors")
    ap.add_argument("--ready-timeout", type=float, default=600, help="seconds each worker may take to load and warm")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=151669, help="vocabulary size of the model (Qwen3: 151669)")
    args = ap.parse_args()

    rep = Report()
    directory = tempfile.mkdtemp(prefix="xc.", dir="/tmp")  # short: sun_path holds 104 bytes
    os.chmod(directory, 0o700)
    mlx = Worker("mlx", args.mlx_cmd, directory, args.ready_timeout)
    llama = Worker("llama", args.llama_cmd, directory, args.ready_timeout)
    try:
        for w in (mlx, llama):
            w.wait_ready(args.ready_timeout)
        h = mlx.health
        rep.check(
            all(isinstance(h.get(k), int) and h[k] > 0 for k in ("n_embd", "max_tokens", "max_batch_tokens"))
            and isinstance(h.get("model"), str) and h["model"] != "",
            "health: ready with n_embd, max_tokens, max_batch_tokens and model",
            json.dumps(h),
        )
        rep.check(h.get("pid") == mlx.proc.pid, "health: pid is the process started", f"{h.get('pid')} vs {mlx.proc.pid}")
        rep.check(
            h.get("n_embd") == llama.health.get("n_embd"),
            "health: n_embd equals the llama.cpp worker's",
            f"{h.get('n_embd')} vs {llama.health.get('n_embd')}",
        )

        status, headers, body = mlx.call("GET", "/nope")
        rep.check(status == 404 and isinstance(body, dict) and "error" in body, "404 for an unknown path", f"{status} {body}")
        status, headers, body = mlx.call("GET", "/embed")
        rep.check(status == 405 and headers.get("allow") == "POST", "405 with Allow: POST for GET /embed", f"{status} {headers.get('allow')}")

        # Keep-alive: several requests on one connection.
        mlx.conn.close()
        socks = set()
        for _ in range(3):
            mlx.call("GET", "/health")
            socks.add(id(mlx.conn.sock))
        rep.check(len(socks) == 1 and mlx.conn.sock is not None, "keep-alive: three requests on one connection")

        # The protocol's refusals (docs/architecture.md; the Go handler's wording), which
        # the llama.cpp worker is expected to give as well.
        max_tokens = mlx.health["max_tokens"]
        too_long = max_tokens + 1
        bad = [
            ("empty list", {"tokens": []}, {"error": '"tokens" is empty; send at least one sequence'}),
            ("empty sequence", {"tokens": [[1], []]}, {"error": "the sequence is empty", "index": 1}),
            ("negative id", {"tokens": [[1], [5, -2]]}, {"error": "token 1 is id -2; ids are not negative", "index": 1}),
            ("missing tokens", {}, {"error": '"tokens" is missing; send {"tokens":[[id,...],...]}'}),
            (
                "out-of-vocabulary id",
                {"tokens": [[1], [2, args.vocab]]},
                {"error": f"token 1 is id {args.vocab}, outside the vocabulary [0, {args.vocab})", "index": 1},
            ),
            (
                "too long",
                {"tokens": [[1] * too_long]},
                {"error": f"the sequence has {too_long} tokens; this worker accepts at most {max_tokens} (max_tokens)", "index": 0},
            ),
        ]
        for name, req, want in bad:
            got = mlx.call("POST", "/embed", req)
            rep.check(got[0] == 400 and got[2] == want, f"400: {name}", f"{got[0]} {got[2]}")
            other = llama.call("POST", "/embed", req)
            if (other[0], other[2]) != (400, want) and not (name == "too long" and llama.health["max_tokens"] != max_tokens):
                print(f"note: the llama.cpp worker answers {name} with {other[0]} {other[2]}")
        got = mlx.call("POST", "/embed", "{not json")
        rep.check(
            got[0] == 400 and str(got[2].get("error", "")).startswith('the body is not a JSON object {"tokens":[[id,...],...]}: '),
            "400 for a body that is not JSON",
            f"{got[0]} {got[2]}",
        )
        tp = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
        got = mlx.call("POST", "/embed", json.dumps({"tokens": [[1, EOS]]}), headers=tp)
        rep.check(got[0] == 200, "traceparent accepted", f"{got[0]}")

        rng = random.Random(args.seed)
        max_tokens = min(mlx.health["max_tokens"], llama.health["max_tokens"])
        seqs = sequences(rng, max_tokens, EOS)
        singles = []
        worst = 1.0
        for s in seqs:
            a = mlx.embed([s])[0]
            b = llama.embed([s])[0]
            singles.append(a)
            c = cosine(a, b)
            worst = min(worst, c) if not math.isnan(c) else float("nan")
            scale = max(abs(x) for x in b) or 1.0
            diff = max(abs(x - y) for x, y in zip(a, b)) / scale
            rep.check(
                len(a) == len(b) and c >= args.min_cosine,
                f"vectors: {len(s)} tokens",
                f"cosine {c:.6f}, max |diff| / max |llama| {diff:.2e}",
            )
        batch = [seqs[i] for i in reversed(range(len(seqs))) if len(seqs[i]) <= 1024]
        answers = mlx.embed(batch)
        by_len = {len(s): v for s, v in zip(seqs, singles)}
        ok = all(cosine(v, by_len[len(s)]) >= 0.999999 for s, v in zip(batch, answers))
        rep.check(ok and len(answers) == len(batch), "a batch is answered in input order, as one-by-one")
        print(f"worst cosine {worst:.6f} over {len(seqs)} sequences (threshold {args.min_cosine})")

        code = mlx.stop_by_stdin()
        rep.check(code == 0, "stdin EOF stops the worker with status 0", f"exit {code}")
        rep.check(not os.path.exists(mlx.socket), "the socket is removed on exit")
    except Exception as e:  # report and fail rather than a traceback mid-run
        rep.check(False, "run", f"{type(e).__name__}: {e}")
    finally:
        for w in (mlx, llama):
            if w.proc.poll() is None:
                w.stop_by_stdin()
            w.log.close()
        if rep.failed:
            for w in (mlx, llama):
                print(f"--- {w.name} output (tail) ---\n{w.tail()}")
    print(f"{rep.passed} passed, {rep.failed} failed")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
