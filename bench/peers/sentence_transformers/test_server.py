"""Unit tests of server.py's request handling, with a fake model (no torch)."""

import base64
import json
import struct
import threading
import unittest
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer

import server


class ServerTest(unittest.TestCase):
    def setUp(self):
        self.calls = []

        def embed(texts):
            self.calls.append(texts)
            if texts == ["boom"]:
                raise RuntimeError("the model failed")
            # A vector per text from its length; 2 tokens per text plus [CLS], [SEP].
            return [[float(len(t)), 0.5, -1.25] for t in texts], 4 * len(texts)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), server.make_handler(embed, {"status": "ok", "threads": 2}))
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def tearDown(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def post(self, body):
        req = urllib.request.Request(self.url + "/v1/embeddings", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def test_float(self):
        status, body = self.post({"model": "m", "input": ["abc", "de"]})
        self.assertEqual(status, 200)
        self.assertEqual(self.calls, [["abc", "de"]])
        self.assertEqual([d["index"] for d in body["data"]], [0, 1])
        self.assertEqual(body["data"][1]["embedding"], [2.0, 0.5, -1.25])
        self.assertEqual(body["usage"], {"prompt_tokens": 8, "total_tokens": 8})
        self.assertEqual(body["model"], "m")

    def test_base64_little_endian_float32(self):
        status, body = self.post({"model": "m", "input": "abcd", "encoding_format": "base64"})
        self.assertEqual(status, 200)
        raw = base64.b64decode(body["data"][0]["embedding"])
        self.assertEqual(struct.unpack("<3f", raw), (4.0, 0.5, -1.25))

    def test_bad_requests(self):
        for body, want in [
            ({"input": []}, "input must be"),
            ({"input": [1, 2]}, "input must be"),
            ({"input": ["a"], "encoding_format": "int8"}, "encoding_format must be"),
        ]:
            status, got = self.post(body)
            self.assertEqual(status, 400, body)
            self.assertIn(want, got["error"]["message"])
            self.assertEqual(got["error"]["type"], "invalid_request_error")
        self.assertEqual(self.calls, [])

    def test_model_error_is_500_and_the_server_stays_up(self):
        status, got = self.post({"input": ["boom"]})
        self.assertEqual((status, got["error"]["message"]), (500, "RuntimeError: the model failed"))
        status, _ = self.post({"input": ["ok"]})
        self.assertEqual(status, 200)

    def test_health(self):
        with urllib.request.urlopen(self.url + "/health") as r:
            self.assertEqual(json.load(r), {"status": "ok", "threads": 2})


if __name__ == "__main__":
    unittest.main()
