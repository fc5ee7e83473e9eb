// Starts a real `embed-stack serve` for one test file, the way the Go suite does: the
// binary and model from EMBED_STACK_BIN / EMBED_STACK_MODEL (default bin/embed-stack and
// models/tiny.gguf under the repository root), a free loopback port, a bounded wait for
// GET /ready, and SIGTERM at the end. EMBED_STACK_URL points the tests at a server someone
// else runs instead (then nothing is started or stopped).
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const READY_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;
const STDERR_TAIL = 16 * 1024;

function repoRoot() {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'go.mod'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error('no go.mod above conformance/node');
    dir = parent;
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// serve converts a model's F16 matrices to BF16 at load into --weights-cache (under
// --weights auto on a CPU with AVX-512 BF16), by default the user's
// ~/.cache/huggingface/embed-stack/weights; the servers of this process convert into a
// folder of their own instead, made on first use and removed at exit, as the Go
// suites' do (internal/e2e's Run).
let weightsCache = '';
function testWeightsCache() {
  if (!weightsCache) {
    weightsCache = mkdtempSync(join(tmpdir(), 'embed-stack-test-weights-'));
    process.once('exit', () => rmSync(weightsCache, { recursive: true, force: true }));
  }
  return weightsCache;
}

/**
 * @returns {Promise<{url?: string, model?: string, skip?: string, stderr: () => string,
 *   stop: () => Promise<{code: number|null, signal: string|null}|null>}>}
 */
export async function startServer(flags = []) {
  if (process.env.EMBED_STACK_URL && flags.length === 0) {
    return { url: process.env.EMBED_STACK_URL.replace(/\/+$/, ''), stderr: () => '', stop: async () => null };
  }
  const root = repoRoot();
  const bin = process.env.EMBED_STACK_BIN || join(root, 'bin', 'embed-stack');
  const model = process.env.EMBED_STACK_MODEL || join(root, 'models', 'tiny.gguf');
  const missing = [bin, model].filter((p) => !existsSync(p));
  if (missing.length > 0) {
    const reason = `missing ${missing.join(', ')}: run \`make build models\` first`;
    if (process.env.EMBED_STACK_REQUIRE_E2E === '1') throw new Error(`EMBED_STACK_REQUIRE_E2E=1 and ${reason}`);
    return { skip: reason, stderr: () => '', stop: async () => null };
  }

  const port = await freePort();
  const addr = `127.0.0.1:${port}`;
  const child = spawn(bin, ['serve', '--model', model, '--addr', addr, ...flags], {
    cwd: root,
    env: { ...process.env, EMBED_STACK_WEIGHTS_CACHE: testWeightsCache() },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let tail = '';
  const keep = (chunk) => {
    tail = (tail + chunk.toString()).slice(-STDERR_TAIL);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  let exit = null;
  exited.then((e) => {
    exit = e;
  });

  const url = `http://${addr}`;
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let last = 'no answer';
  for (;;) {
    if (exit) throw new Error(`embed-stack serve exited before ready (${JSON.stringify(exit)})\nstderr:\n${tail}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`GET /ready not 200 after ${READY_TIMEOUT_MS} ms (last: ${last})\nstderr:\n${tail}`);
    }
    try {
      const res = await fetch(`${url}/ready`, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      if (res.status === 200) break;
      last = `status ${res.status}`;
    } catch (err) {
      last = String(err);
    }
    await sleep(50);
  }

  return {
    url,
    model,
    stderr: () => tail,
    // stop sends SIGTERM and resolves with how the server exited; SIGKILL after a bound.
    stop: async () => {
      if (exit) return exit;
      child.kill('SIGTERM');
      const timer = sleep(STOP_TIMEOUT_MS).then(() => 'timeout');
      const first = await Promise.race([exited, timer]);
      if (first === 'timeout') {
        child.kill('SIGKILL');
        await exited;
        throw new Error(`embed-stack serve still running ${STOP_TIMEOUT_MS} ms after SIGTERM; killed\nstderr:\n${tail}`);
      }
      return first;
    },
  };
}

// rawEmbed posts a body to /v1/embeddings with fetch and returns the parsed JSON with the
// status, so tests compare the SDKs against the wire.
export async function rawPost(url, path, body, headers = {}) {
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    throw new Error(`POST ${path}: status ${res.status}, body is not JSON: ${text.slice(0, 300)}`);
  }
  return { status: res.status, headers: res.headers, json };
}

export async function rawEmbed(url, body) {
  const { status, json } = await rawPost(url, '/v1/embeddings', { encoding_format: 'float', ...body });
  if (status !== 200) throw new Error(`POST /v1/embeddings ${JSON.stringify(body).slice(0, 200)}: ${status} ${JSON.stringify(json)}`);
  return json;
}

export async function modelID(url) {
  const res = await fetch(`${url}/v1/models`);
  const json = await res.json();
  if (res.status !== 200 || !json.data?.[0]?.id) throw new Error(`GET /v1/models: ${res.status} ${JSON.stringify(json)}`);
  return json.data[0].id;
}

export function norm(v) {
  let s = 0;
  for (const x of v) s += x * x;
  return Math.sqrt(s);
}

export function cosine(a, b) {
  let dot = 0;
  for (let i = 0; i < a.length; i++) dot += a[i] * b[i];
  return dot / (norm(a) * norm(b));
}

export function maxAbsDiff(a, b) {
  if (a.length !== b.length) return Infinity;
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}
