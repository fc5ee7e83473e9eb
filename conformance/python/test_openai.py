"""The official `openai` Python SDK with its default settings against the real server.
With no encoding_format the SDK asks for base64 and decodes little-endian float32
itself, so every vector here also proves the base64 path against the server's float
output."""

import asyncio
import json

import numpy as np
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from helpers import assert_same, cosine, float32_bits, model_id, raw_embed

# cl100k_base ids of "hello world" (tiktoken, as LangChain sends them).
HELLO_WORLD_CL100K = [15339, 1917]


@pytest.fixture(scope="module")
def client(server):
    # Default settings: only the address and a key (the server checks none).
    return OpenAI(base_url=server.url + "/v1", api_key="unused")


def test_default_request_is_base64_and_equals_float(server, client):
    text = "The SDK decodes base64 by itself."
    raw = client.embeddings.with_raw_response.create(model="text-embedding-3-small", input=text)
    wire = json.loads(raw.http_response.text)
    sent = json.loads(raw.http_response.request.content)
    assert sent["encoding_format"] == "base64", sent
    # On the wire the vector is a base64 string, which the SDK turned into floats.
    assert isinstance(wire["data"][0]["embedding"], str), wire["data"][0]
    res = raw.parse()
    want, want_resp = raw_embed(server.url, {"model": "text-embedding-3-small", "input": text})
    assert res.object == "list" and res.model == "text-embedding-3-small"
    assert [d.index for d in res.data] == [0] and res.data[0].object == "embedding"
    assert_same(res.data[0].embedding, want[0], "string input")
    # Bit for bit the float32 values of the float response.
    assert float32_bits(res.data[0].embedding) == float32_bits(want[0])
    assert res.usage.model_dump() == want_resp["usage"]
    assert res.usage.prompt_tokens == res.usage.total_tokens > 1


def test_list_keeps_order_and_same_text_same_vector(server, client):
    texts = ["first", "a second, longer input with ünïcödé", "first", "3"]
    mid = model_id(server.url)
    res = client.embeddings.create(model=mid, input=texts)
    want, want_resp = raw_embed(server.url, {"model": mid, "input": texts})
    assert res.model == mid
    assert [d.index for d in res.data] == [0, 1, 2, 3]
    for i, d in enumerate(res.data):
        assert_same(d.embedding, want[i], f"input {i}")
    assert res.usage.model_dump() == want_resp["usage"]
    assert float32_bits(res.data[0].embedding) == float32_bits(res.data[2].embedding), "same text, same vector"
    assert cosine(res.data[0].embedding, res.data[1].embedding) < 0.999, "different texts, different vectors"


def test_token_ids_are_cl100k_and_equal_the_text(server, client):
    one = client.embeddings.create(model="m", input=HELLO_WORLD_CL100K)
    many = client.embeddings.create(model="m", input=[HELLO_WORLD_CL100K, [9906, 4435, 0]])
    want, _ = raw_embed(server.url, {"input": ["hello world", "Hello World!"]})
    assert_same(one.data[0].embedding, want[0], "one id list")
    assert_same(many.data[0].embedding, want[0], "list of id lists, 0")
    assert_same(many.data[1].embedding, want[1], "list of id lists, 1")


def test_dimensions_truncate_and_renormalise(server, client):
    text = "Matryoshka"
    full, _ = raw_embed(server.url, {"input": text})
    for dims in (32, 48, 64):  # the tiny model has 64 dimensions
        got = np.array(client.embeddings.create(model="m", input=text, dimensions=dims).data[0].embedding)
        assert got.shape == (dims,)
        assert abs(np.linalg.norm(got) - 1) <= 1e-5, f"dimensions {dims}: norm {np.linalg.norm(got)}"
        prefix = full[0][:dims]
        assert_same(got, prefix / np.linalg.norm(prefix), f"dimensions {dims}")


def test_extra_body_input_type_and_instruction(server, client):
    text = "where do llamas live"
    task = "Given a question about animals, retrieve passages that answer it"
    q = client.embeddings.create(model="m", input=text, extra_body={"input_type": "query", "instruction": task})
    q_default = client.embeddings.create(model="m", input=text, extra_body={"input_type": "query"})
    doc = client.embeddings.create(model="m", input=text)
    want, want_resp = raw_embed(server.url, {"input": text, "input_type": "query", "instruction": task})
    want_default, _ = raw_embed(server.url, {"input": text, "input_type": "query"})
    want_doc, doc_resp = raw_embed(server.url, {"input": text, "input_type": "document"})
    assert_same(q.data[0].embedding, want[0], "query with instruction")
    assert_same(q_default.data[0].embedding, want_default[0], "query, default instruction")
    assert_same(doc.data[0].embedding, want_doc[0], "document (the server default)")
    assert cosine(q.data[0].embedding, doc.data[0].embedding) < 0.999, "query equals document"
    assert cosine(q.data[0].embedding, q_default.data[0].embedding) < 0.999, "the instruction changed nothing"
    # "Instruct: {task}\nQuery:" adds tokens to the query.
    assert q.usage.prompt_tokens == want_resp["usage"]["prompt_tokens"] > doc_resp["usage"]["prompt_tokens"]


def test_async_client_concurrent_requests(server):
    texts = [f"async request {i} about {w}" for i, w in enumerate(["rivers", "tea", "stars", "llamas", "code", "salt"])]

    async def run():
        client = AsyncOpenAI(base_url=server.url + "/v1", api_key="unused")
        try:
            singles = await asyncio.gather(*(client.embeddings.create(model="m", input=t) for t in texts))
            query = await client.embeddings.create(model="m", input=texts[:2], dimensions=48, extra_body={"input_type": "query"})
            return singles, query
        finally:
            await client.close()

    singles, query = asyncio.run(run())
    want, _ = raw_embed(server.url, {"input": texts})
    for i, r in enumerate(singles):
        assert_same(r.data[0].embedding, want[i], f"async {i}")
    want_q, _ = raw_embed(server.url, {"input": texts[:2], "dimensions": 48, "input_type": "query"})
    for i in range(2):
        assert_same(query.data[i].embedding, want_q[i], f"async query {i}")


def test_bad_request_error(server, client):
    cases = [
        ({"input": ""}, "input", "empty_input", "input 0 is an empty string; every input must hold text."),
        ({"input": "a", "dimensions": 16}, "dimensions", "invalid_value",
         "'dimensions' must be between 32 and 64 for this model; got 16."),
        ({"input": [[15339, 100256]]}, "input", "invalid_token_id",
         "input 0: cl100k: token 1 is id 100256, which cl100k_base does not assign (token ids are read as tiktoken "
         "cl100k_base; start the server with --token-ids=native to send Qwen3 ids)."),
    ]
    before = server.requests(400)
    for kwargs, param, code, message in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.embeddings.create(model="m", **kwargs)
        err = e.value
        assert type(err) is openai.BadRequestError
        assert err.status_code == 400, kwargs
        assert err.body == {"message": message, "type": "invalid_request_error", "param": param, "code": code}, err.body
        assert (err.type, err.param, err.code) == ("invalid_request_error", param, code)
    assert server.requests(400) == before + len(cases), "a 400 is not retried"
