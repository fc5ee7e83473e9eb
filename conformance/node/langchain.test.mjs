// @langchain/openai's OpenAIEmbeddings (1.x) against a real embed-stack. LangChain JS
// sends text (not token ids), no encoding_format (so the openai SDK's base64 default),
// and its model name; embed-stack's `:query` model suffix is how a LangChain user gets
// query wrapping without any custom code.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { OpenAIEmbeddings } from '@langchain/openai';

import { cosine, maxAbsDiff, modelID, norm, rawEmbed, startServer } from './server.mjs';

const SAME_TOL = 1e-6;
const NORM_TOL = 1e-5;

const srv = await startServer();

describe('@langchain/openai OpenAIEmbeddings', { skip: srv.skip }, () => {
  let id;
  before(async () => {
    id = await modelID(srv.url);
  });
  after(async () => {
    const exit = await srv.stop();
    if (exit) assert.deepEqual(exit, { code: 0, signal: null }, `server exit after SIGTERM\n${srv.stderr()}`);
  });

  const embeddings = (fields = {}) =>
    new OpenAIEmbeddings({ configuration: { baseURL: `${srv.url}/v1` }, apiKey: 'x', maxRetries: 0, ...fields });

  function assertSame(got, want, what) {
    assert.equal(got.length, want.length, `${what}: length`);
    const d = maxAbsDiff(Array.from(got), want);
    assert.ok(d <= SAME_TOL, `${what}: max |Δ| ${d} > ${SAME_TOL}`);
    assert.ok(Math.abs(norm(got) - 1) <= NORM_TOL, `${what}: norm ${norm(got)}`);
  }

  test('the default model text-embedding-ada-002 is accepted; embedDocuments equals raw documents', async () => {
    const e = embeddings();
    assert.equal(e.model, 'text-embedding-ada-002');
    const texts = ['LangChain document one', 'and document two'];
    const got = await e.embedDocuments(texts);
    const raw = await rawEmbed(srv.url, { model: 'text-embedding-ada-002', input: texts, input_type: 'document' });
    assert.equal(got.length, 2);
    got.forEach((v, i) => assertSame(v, raw.data[i].embedding, `document ${i}`));
    assert.ok(cosine(got[0], got[1]) < 0.999, 'different texts, different vectors');
  });

  test('embedQuery with the default model is embedded as a document (the server default)', async () => {
    const text = 'what do llamas eat';
    const got = await embeddings().embedQuery(text);
    const doc = await rawEmbed(srv.url, { model: 'text-embedding-ada-002', input: text, input_type: 'document' });
    assertSame(got, doc.data[0].embedding, 'embedQuery');
  });

  test('model "<id>:query": embedQuery equals a raw input_type=query request', async () => {
    const text = 'what do llamas eat';
    const got = await embeddings({ model: `${id}:query` }).embedQuery(text);
    const query = await rawEmbed(srv.url, { model: id, input: text, input_type: 'query' });
    const doc = await rawEmbed(srv.url, { model: id, input: text, input_type: 'document' });
    assertSame(got, query.data[0].embedding, 'embedQuery');
    const c = cosine(got, doc.data[0].embedding);
    assert.ok(c < 0.999, `query vs document cosine ${c}: the suffix changed nothing`);
  });

  test('model "<id>:document": embedDocuments equals raw documents', async () => {
    const texts = ['suffix document'];
    const got = await embeddings({ model: `${id}:document` }).embedDocuments(texts);
    const raw = await rawEmbed(srv.url, { model: id, input: texts, input_type: 'document' });
    assertSame(got[0], raw.data[0].embedding, 'document');
  });

  test('batches of batchSize keep input order across requests', async () => {
    const texts = ['b0', 'b1 longer', 'b2 with more words', 'b3', 'b4 last'];
    const got = await embeddings({ batchSize: 2 }).embedDocuments(texts);
    const raw = await rawEmbed(srv.url, { model: 'm', input: texts });
    assert.equal(got.length, texts.length);
    got.forEach((v, i) => assertSame(v, raw.data[i].embedding, `text ${i}`));
  });

  test('dimensions: 48-dimensional vectors are the renormalised prefix', async () => {
    const text = 'dimension check';
    const got = await embeddings({ dimensions: 48 }).embedQuery(text);
    const full = (await rawEmbed(srv.url, { model: 'm', input: text })).data[0].embedding;
    const prefix = full.slice(0, 48);
    const n = norm(prefix);
    assertSame(got, prefix.map((x) => x / n), 'dimensions 48');
  });

  test('newlines are stripped by LangChain before sending', async () => {
    const got = await embeddings().embedQuery('line one\nline two');
    const raw = await rawEmbed(srv.url, { model: 'm', input: 'line one line two' });
    assertSame(got, raw.data[0].embedding, 'stripNewLines');
  });
});
