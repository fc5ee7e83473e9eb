// Runs the node snippets of docs/clients.md against a real embed-stack server: each
// snippet file is run as it is, only its address pointed at the test's server (a copy
// next to it, so its imports resolve here), and what it prints must be the cosine
// similarities that raw requests give for the same documents (as documents) and query
// (as a query, with the default instruction).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startServer, rawEmbed } from '../../conformance/node/server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const DEFAULT_URL = 'http://127.0.0.1:8080';
// Printed with 4 decimals; float32 sums differ from ours in the 6th or 7th.
const TOL = 1.5e-4;

const docs = [
  'The capital of China is Beijing.',
  'Gravity is a force that attracts two bodies towards each other.',
];
const query = 'What is the capital of China?';

let srv;
before(async () => {
  // One llama.cpp thread: test machines are shared, and threads that wait for each
  // other at every graph node are slower there than one.
  srv = await startServer(['--threads', '1']);
});
after(async () => {
  const exit = await srv?.stop();
  if (exit && exit.code !== 0) throw new Error(`server exited ${JSON.stringify(exit)}\n${srv.stderr()}`);
});

async function runSnippet(name) {
  const src = readFileSync(join(here, name), 'utf8');
  assert.ok(src.includes(DEFAULT_URL), `${name} does not use ${DEFAULT_URL}`);
  const copy = join(here, `.${name}.${process.pid}.mjs`);
  writeFileSync(copy, src.replaceAll(DEFAULT_URL, srv.url));
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [copy], { timeout: 60_000 });
    return stdout;
  } finally {
    rmSync(copy, { force: true });
  }
}

const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);

async function expected() {
  const d = await rawEmbed(srv.url, { model: 'm', input: docs, input_type: 'document' });
  const q = await rawEmbed(srv.url, { model: 'm', input: query, input_type: 'query' });
  const qAsDoc = await rawEmbed(srv.url, { model: 'm', input: query, input_type: 'document' });
  return {
    sims: d.data.map((x) => dot(q.data[0].embedding, x.embedding)),
    asDocument: d.data.map((x) => dot(qAsDoc.data[0].embedding, x.embedding)),
  };
}

for (const name of ['openai.mjs', 'langchain.mjs']) {
  test(`${name} prints the query's cosine similarity to each document`, async (t) => {
    if (srv.skip) return t.skip(srv.skip);
    const out = await runSnippet(name);
    const lines = out.trim().split('\n');
    assert.equal(lines.length, docs.length, `output:\n${out}`);
    const want = await expected();
    lines.forEach((line, i) => {
      const m = line.match(/^(-?\d+\.\d{4}) (.*)$/);
      assert.ok(m, `line ${i} ${JSON.stringify(line)}`);
      assert.equal(m[2], docs[i]);
      const got = Number(m[1]);
      assert.ok(Math.abs(got - want.sims[i]) <= TOL, `doc ${i}: printed ${got}, raw requests give ${want.sims[i]}`);
      // The query really was embedded as a query (with the instruction).
      if (Math.abs(want.sims[i] - want.asDocument[i]) > 10 * TOL) {
        assert.ok(Math.abs(got - want.asDocument[i]) > TOL, `doc ${i}: ${got} is the similarity of the query embedded as a document`);
      }
    });
  });
}
