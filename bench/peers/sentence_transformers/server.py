"""sentence-transformers behind an OpenAI-compatible POST /v1/embeddings.

The benchmark peer of `embed-stack bench --sentence-transformers DIR`: the original
checkpoint (a sentence-transformers folder: modules.json, the Transformer's weights
and tokenizer, 1_Pooling) run by torch on the CPU, with torch.set_num_threads set to
the thread count every other contender gets. It answers what the harness sends:

- POST /v1/embeddings {"model", "input": [texts], "encoding_format": "float"|"base64"}
  -> {"object": "list", "data": [{"object", "index", "embedding"}], "model",
  "usage": {"prompt_tokens", "total_tokens"}}, prompt_tokens counting the tokens
  the model saw (its tokenizer's attention mask, [CLS] and [SEP] included);
- GET /health -> {"status": "ok", "threads", "max_seq_length", "versions"}.

One request is one forward pass of all its texts (the batch sentence-transformers'
encode makes of up to 32 texts, here the request's), and requests run one at a time:
sentence-transformers has no cross-request batching, and two passes at once would
share the same threads. The model's max_seq_length is raised to what its position
embeddings hold (--max-seq-length, 512 for BERT), so that it embeds the same tokens
as a GGUF server instead of truncating at the checkpoint's 256.

Only the standard library is imported at module level: the request handling is unit
tested without torch (test_server.py); main() imports torch and
sentence_transformers.
"""

import argparse
import base64
import json
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class BadRequest(Exception):
    """A request the OpenAI API answers with 400."""


def parse_request(body):
    """Returns (texts, encoding_format) of an embeddings request body (bytes)."""
    try:
        req = json.loads(body)
    except ValueError as e:
        raise BadRequest("the body is not JSON: %s" % e)
    if not isinstance(req, dict):
        raise BadRequest("the body is not a JSON object")
    texts = req.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise BadRequest("input must be a string or a non-empty array of strings")
    fmt = req.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise BadRequest("encoding_format must be float or base64, not %r" % fmt)
    return texts, fmt, req.get("model") or ""


def encode_vector(vector, fmt):
    """A vector as the OpenAI API writes it: a list of numbers, or base64 of
    little-endian float32s."""
    values = [float(x) for x in vector]
    if fmt == "base64":
        return base64.b64encode(struct.pack("<%df" % len(values), *values)).decode("ascii")
    return values


def response(vectors, tokens, fmt, model):
    """The body of a 200."""
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": encode_vector(v, fmt)} for i, v in enumerate(vectors)],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def make_handler(embed, health):
    """A request handler class: embed(texts) -> (vectors, tokens) runs under one lock;
    health is the /health body."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send_json(self, status, obj):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, status, message, typ):
            self.send_json(status, {"error": {"message": message, "type": typ, "param": None, "code": None}})

        def do_GET(self):
            if self.path == "/health":
                self.send_json(200, health)
            else:
                self.error(404, "no route GET %s" % self.path, "invalid_request_error")

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if self.path != "/v1/embeddings":
                self.error(404, "no route POST %s" % self.path, "invalid_request_error")
                return
            try:
                texts, fmt, model = parse_request(body)
            except BadRequest as e:
                self.error(400, str(e), "invalid_request_error")
                return
            try:
                with lock:
                    vectors, tokens = embed(texts)
            except Exception as e:  # the harness reports it; the server stays up
                self.error(500, "%s: %s" % (type(e).__name__, e), "server_error")
                return
            self.send_json(200, response(vectors, tokens, fmt, model))

    return Handler


def load(model_dir, threads, max_seq_length):
    """Loads the checkpoint on the CPU; returns (embed, health)."""
    import torch
    import sentence_transformers
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(model_dir, device="cpu")
    model.eval()
    if max_seq_length:
        model.max_seq_length = max_seq_length

    def embed(texts):
        # What SentenceTransformer.encode does for one batch, with the token count
        # kept: tokenize (truncating at max_seq_length), forward, the pooled output.
        features = model.tokenize(texts)
        tokens = int(features["attention_mask"].sum())
        with torch.inference_mode():
            out = model(features)["sentence_embedding"]
        return out.float().numpy(), tokens

    health = {
        "status": "ok",
        "threads": torch.get_num_threads(),
        "max_seq_length": model.max_seq_length,
        "versions": {
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
        },
    }
    return embed, health


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="sentence-transformers checkpoint folder")
    ap.add_argument("--addr", default="127.0.0.1:8080", help="host:port to listen on")
    ap.add_argument("--threads", type=int, required=True, help="torch.set_num_threads")
    ap.add_argument("--max-seq-length", type=int, default=512, help="the model's max_seq_length (0: the checkpoint's)")
    args = ap.parse_args(argv)
    embed, health = load(args.model, args.threads, args.max_seq_length)
    host, _, port = args.addr.rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), make_handler(embed, health))
    server.daemon_threads = True
    print("sentence-transformers server on %s: %s" % (args.addr, json.dumps(health)), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
