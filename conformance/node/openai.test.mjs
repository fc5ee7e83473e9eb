// The official openai SDK (7.x) against a real embed-stack. With no encoding_format the
// SDK asks for base64 and decodes little-endian float32 itself, so these tests prove the
// base64 path end to end against the server's own float output.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI, { BadRequestError, NotFoundError } from 'openai';

import { cosine, maxAbsDiff, modelID, norm, rawEmbed, rawPost, startServer } from './server.mjs';

const SAME_TOL = 1e-6; // per component, SDK (base64) vs raw float
const NORM_TOL = 1e-5;

const srv = await startServer();

describe('openai SDK', { skip: srv.skip }, () => {
  let client;
  let id;
  before(async () => {
    client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
    id = await modelID(srv.url);
  });
  after(async () => {
    const exit = await srv.stop();
    if (exit) assert.deepEqual(exit, { code: 0, signal: null }, `server exit after SIGTERM\n${srv.stderr()}`);
  });

  // assertEqualsRaw requires the SDK's vectors to be the raw float vectors: within 1e-6,
  // and bit-identical once the raw JSON number is rounded to float32.
  function assertEqualsRaw(got, raw) {
    assert.equal(got.length, raw.data.length, 'vector count');
    for (let i = 0; i < got.length; i++) {
      const a = Array.from(got[i].embedding);
      const b = raw.data[i].embedding;
      assert.equal(got[i].index, i);
      assert.equal(got[i].object, 'embedding');
      assert.equal(a.length, b.length, `data[${i}] length`);
      assert.ok(maxAbsDiff(a, b) <= SAME_TOL, `data[${i}] max |Δ| ${maxAbsDiff(a, b)} > ${SAME_TOL}`);
      const firstOff = a.findIndex((x, j) => x !== Math.fround(b[j]));
      assert.equal(firstOff, -1, `data[${i}][${firstOff}]: base64 ${a[firstOff]} vs float32(${b[firstOff]})`);
      assert.ok(Math.abs(norm(a) - 1) <= NORM_TOL, `data[${i}] norm ${norm(a)}`);
    }
  }

  test('a string input through the default (base64) encoding equals the float response', async () => {
    const input = 'The SDK decodes base64 by itself.';
    const res = await client.embeddings.create({ model: 'text-embedding-3-small', input });
    const raw = await rawEmbed(srv.url, { model: 'text-embedding-3-small', input });
    assert.equal(res.object, 'list');
    assert.equal(res.model, 'text-embedding-3-small');
    assert.equal(res.data.length, 1);
    assertEqualsRaw(res.data, raw);
    assert.ok(raw.data[0].embedding.length >= 32, `native dimension ${raw.data[0].embedding.length}`);
    assert.deepEqual(res.usage, raw.usage);
    assert.ok(res.usage.prompt_tokens > 1 && res.usage.prompt_tokens === res.usage.total_tokens, JSON.stringify(res.usage));
  });

  test('a list input keeps order and equals the float response', async () => {
    const input = ['first', 'a second, longer input with ünïcödé', 'first', '3'];
    const res = await client.embeddings.create({ model: id, input });
    const raw = await rawEmbed(srv.url, { model: id, input });
    assert.equal(res.model, id);
    assertEqualsRaw(res.data, raw);
    assert.deepEqual(res.usage, raw.usage);
    // Equal inputs give equal vectors; different ones do not.
    assert.ok(maxAbsDiff(Array.from(res.data[0].embedding), Array.from(res.data[2].embedding)) <= SAME_TOL);
    assert.ok(cosine(Array.from(res.data[0].embedding), Array.from(res.data[1].embedding)) < 0.999);
  });

  test('an explicit float encoding passes through unchanged', async () => {
    const input = ['explicit float'];
    const res = await client.embeddings.create({ model: 'm', input, encoding_format: 'float' });
    const raw = await rawEmbed(srv.url, { model: 'm', input });
    assert.deepEqual(res.data[0].embedding, raw.data[0].embedding);
  });

  test('dimensions truncates and re-normalises', async () => {
    const input = 'Matryoshka';
    const full = (await rawEmbed(srv.url, { model: 'm', input })).data[0].embedding;
    const res = await client.embeddings.create({ model: 'm', input, dimensions: 32 });
    const got = Array.from(res.data[0].embedding);
    assert.equal(got.length, 32);
    const prefix = full.slice(0, 32);
    const n = norm(prefix);
    const want = prefix.map((x) => x / n);
    assert.ok(maxAbsDiff(got, want) <= SAME_TOL, `max |Δ| ${maxAbsDiff(got, want)}`);
  });

  test('query input_type through the SDK body equals a raw query request and differs from the document', async () => {
    const input = 'where do llamas live';
    const res = await client.embeddings.create({ model: 'm', input, input_type: 'query' });
    const rawQuery = await rawEmbed(srv.url, { model: 'm', input, input_type: 'query' });
    const rawDoc = await rawEmbed(srv.url, { model: 'm', input });
    assertEqualsRaw(res.data, rawQuery);
    assert.ok(cosine(Array.from(res.data[0].embedding), rawDoc.data[0].embedding) < 0.999);
    assert.ok(rawQuery.usage.prompt_tokens > rawDoc.usage.prompt_tokens, 'the instruction adds tokens');
  });

  test('an empty string is a 400 BadRequestError with the OpenAI envelope', async () => {
    await assert.rejects(client.embeddings.create({ model: 'm', input: '' }), (err) => {
      assert.ok(err instanceof BadRequestError, `got ${err?.constructor?.name}: ${err}`);
      assert.equal(err.status, 400);
      assert.equal(err.type, 'invalid_request_error');
      assert.equal(err.param, 'input');
      assert.equal(err.code, 'empty_input');
      return true;
    });
  });

  test('raw empty-array input is a 400 with the envelope', async () => {
    const { status, json } = await rawPost(srv.url, '/v1/embeddings', { model: 'm', input: [] });
    assert.equal(status, 400);
    assert.deepEqual(Object.keys(json.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(json.error.type, 'invalid_request_error');
    assert.equal(json.error.param, 'input');
  });

  test('models.retrieve accepts every name embeddings.create accepts', async () => {
    const list = await client.models.list();
    assert.deepEqual(list.data.map((m) => m.id), [id]);
    // The served id, a suffixed form, and (one model, no --strict-model) any name:
    // embeddings.create takes each, so retrieve must not throw NotFoundError.
    for (const name of [id, `${id}:query`, 'text-embedding-3-small']) {
      const m = await client.models.retrieve(name);
      assert.equal(m.id, name);
      assert.equal(m.object, 'model');
      assert.equal(m.owned_by, 'embed-stack');
    }
  });
});

describe('openai SDK, several models', { skip: srv.skip || (!srv.model && 'a server at EMBED_STACK_URL: no model path to serve') }, () => {
  let multi;
  let client;
  before(async () => {
    // startServer's --model (the tiny model, named by its GGUF) is the first entry.
    multi = await startServer(['--model', `small=${srv.model}`, '--model-alias', 'small=text-embedding-3-small']);
    client = new OpenAI({ baseURL: `${multi.url}/v1`, apiKey: 'x', maxRetries: 0 });
  });
  after(async () => {
    await multi?.stop();
  });

  test('models.list lists every model and alias; retrieve takes each and refuses others', async () => {
    const ids = (await client.models.list()).data.map((m) => m.id);
    assert.equal(ids.length, 3);
    assert.deepEqual(ids.slice(1), ['small', 'text-embedding-3-small']);
    for (const name of [...ids, 'small:document']) {
      assert.equal((await client.models.retrieve(name)).id, name);
    }
    await assert.rejects(client.models.retrieve('nope'), (err) => {
      assert.ok(err instanceof NotFoundError, `got ${err?.constructor?.name}`);
      assert.equal(err.status, 404);
      assert.equal(err.code, 'model_not_found');
      return true;
    });
    await assert.rejects(client.embeddings.create({ model: 'nope', input: 'a' }), NotFoundError);
    const res = await client.embeddings.create({ model: 'text-embedding-3-small', input: 'a' });
    assert.equal(res.model, 'text-embedding-3-small');
  });
});
