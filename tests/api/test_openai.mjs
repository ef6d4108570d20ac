// test_openai -- the unmodified `openai` npm client (Node 20) against the real daemon.
//
// Non-streamed and streamed completions (with include_usage), output equal to
// `inferd generate` for the same settings and seed, errors surfacing as the
// client's APIError with status/param/code, the API key, models.list and
// models.retrieve.
// usage: node test_openai.mjs <inferd binary>; exits 77 when node_modules is
// missing (CI runs `npm ci` in tests/api first).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
if (!existsSync(path.join(here, 'node_modules', 'openai'))) {
  console.log('skip: tests/api/node_modules missing (run npm ci in tests/api)');
  process.exit(77);
}
const { default: OpenAI } = await import('openai');

const exe = process.argv[2];
const shared = process.env.INFERD_SHARED || path.join(here, '..', '..', '..', 'shared');
const model = path.join(shared, 'models', 'stories260K.gguf');
if (!exe || !existsSync(exe) || !existsSync(model)) {
  console.log('skip: no inferd binary or model');
  process.exit(77);
}
const MODEL = 'stories260K';
const KEY = 'test-key-123';
const PROMPT = 'Once upon a time';

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
}

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

function generate(args) {
  const r = spawnSync(exe, ['generate', '--model', model, '--json', ...args], { encoding: 'utf8' });
  check(r.status === 0, 'generate failed: ' + r.stderr);
  return JSON.parse(r.stdout);
}

const port = await freePort();
let log = '';
const env = { ...process.env, INFERD_API_KEY: KEY };
delete env.NOTIFY_SOCKET;
const d = spawn(exe, ['serve', '--model', model, '--host', '127.0.0.1', '--port', String(port)],
  { env, stdio: ['ignore', 'pipe', 'pipe'] });
d.stdout.on('data', (b) => { log += b; });
d.stderr.on('data', (b) => { log += b; });
let exited = null;
const exitP = new Promise((resolve) => d.on('exit', (code) => { exited = code; resolve(code); }));

async function waitReady() {
  for (let i = 0; i < 600; i++) {
    if (exited !== null) throw new Error('daemon exited ' + exited + '\n' + log);
    try {
      const r = await fetch(`http://127.0.0.1:${port}/health`);
      if (r.status === 200) return;
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('daemon not ready\n' + log);
}

const client = new OpenAI({ apiKey: KEY, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
let fails = 0;
async function test(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} ${(Date.now() - t0) / 1000}s`);
  } catch (e) {
    fails++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

try {
  await waitReady();

  await test('models.list', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    check(ids.length === 1 && ids[0] === MODEL, JSON.stringify(ids));
  });

  await test('models.retrieve', async () => {
    const m = await client.models.retrieve(MODEL);
    check(m.id === MODEL && m.object === 'model' && m.owned_by === 'inferd', JSON.stringify(m));
    let err = null;
    try {
      await client.models.retrieve('nope');
    } catch (e) {
      err = e;
    }
    check(err instanceof OpenAI.NotFoundError && err.status === 404 && err.code === 'model_not_found', String(err));
  });

  await test('completion non-stream = inferd generate', async () => {
    const g = generate(['--prompt', PROMPT, '--max-tokens', '32']);
    const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 32, temperature: 0 });
    check(r.object === 'text_completion' && r.id.startsWith('cmpl-'), JSON.stringify(r));
    check(r.choices[0].text === g.text, `${JSON.stringify(r.choices[0].text)} != ${JSON.stringify(g.text)}`);
    check(r.usage.prompt_tokens === g.prompt_tokens.length && r.usage.completion_tokens === 32, JSON.stringify(r.usage));
  });

  await test('completion sampled with seed = inferd generate', async () => {
    const g = generate(['--prompt', PROMPT, '--max-tokens', '32', '--temperature', '0.8', '--top-p', '0.9', '--seed', '99']);
    const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 32, temperature: 0.8, top_p: 0.9, seed: 99 });
    check(r.choices[0].text === g.text, `${JSON.stringify(r.choices[0].text)} != ${JSON.stringify(g.text)}`);
  });

  await test('completion stream + include_usage', async () => {
    const g = generate(['--prompt', PROMPT, '--max-tokens', '24']);
    const stream = await client.completions.create({
      model: MODEL, prompt: PROMPT, max_tokens: 24, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let chunks = 0;
    let usage = null;
    let finish = null;
    for await (const c of stream) {
      chunks++;
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) {
        text += ch.text;
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    check(chunks > 3, 'chunks ' + chunks);
    check(text === g.text, `${JSON.stringify(text)} != ${JSON.stringify(g.text)}`);
    check(finish === 'length', finish);
    check(usage && usage.completion_tokens === 24 && usage.total_tokens === usage.prompt_tokens + 24, JSON.stringify(usage));
  });

  await test('n, echo, logprobs, stop', async () => {
    const r = await client.completions.create({ model: MODEL, prompt: [PROMPT, 'The cat'], max_tokens: 8, temperature: 0, n: 2, echo: true, logprobs: 2 });
    check(r.choices.length === 4, r.choices.length);
    check(r.choices[0].text.startsWith(PROMPT) && r.choices[2].text.startsWith('The cat'), JSON.stringify(r.choices));
    check(r.choices[0].logprobs.tokens.length === r.choices[0].logprobs.token_logprobs.length, 'logprobs');
    const full = (await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 30, temperature: 0 })).choices[0].text;
    const stop = full.slice(12, 16);
    const s = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 30, temperature: 0, stop: [stop] });
    check(s.choices[0].text === full.slice(0, full.indexOf(stop)) && s.choices[0].finish_reason === 'stop', JSON.stringify(s.choices[0]));
  });

  await test('errors are APIError with status, param, code', async () => {
    const cases = [
      [{ model: MODEL, prompt: PROMPT, max_tokens: 0 }, 400, 'max_tokens'],
      [{ model: MODEL, prompt: PROMPT, temperature: 5 }, 400, 'temperature'],
      [{ model: MODEL, prompt: '', max_tokens: 3 }, 400, 'prompt'],
      [{ model: 'nope', prompt: PROMPT }, 404, 'model'],
      [{ model: MODEL, prompt: PROMPT, max_tokens: 5000 }, 400, 'max_tokens'],
    ];
    for (const [req, status, param] of cases) {
      let err = null;
      try {
        await client.completions.create(req);
      } catch (e) {
        err = e;
      }
      check(err instanceof OpenAI.APIError, 'no APIError for ' + JSON.stringify(req));
      check(err.status === status && err.param === param, `${err.status} ${err.param} for ${JSON.stringify(req)}`);
      check(typeof err.message === 'string' && err.message.length > 0, 'message');
    }
    const bad = new OpenAI({ apiKey: 'wrong', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
    let err = null;
    try {
      await bad.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 2 });
    } catch (e) {
      err = e;
    }
    check(err instanceof OpenAI.AuthenticationError && err.status === 401, String(err));
  });

  await test('stream aborted by the client frees the engine', async () => {
    const ac = new AbortController();
    const stream = await client.completions.create(
      { model: MODEL, prompt: PROMPT, max_tokens: 480, temperature: 0, stream: true, ignore_eos: true },
      { signal: ac.signal });
    let n = 0;
    try {
      for await (const c of stream) {
        if (c.choices.length && ++n === 3) ac.abort();
      }
    } catch { /* aborted */ }
    let used = -1;
    for (let i = 0; i < 100; i++) {
      const m = await (await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { Authorization: 'Bearer ' + KEY } })).text();
      used = Number(/^inferd_kv_blocks_used (\S+)$/m.exec(m)[1]);
      if (used === 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    check(used === 0, 'KV blocks still used: ' + used);
  });
} catch (e) {
  fails++;
  console.log('FAIL setup: ' + (e.stack || e));
} finally {
  d.kill('SIGTERM');
  const code = exited !== null ? exited : await exitP;
  if (code !== 0) {
    fails++;
    console.log(`daemon exit status ${code}\n${log.slice(-3000)}`);
  }
}
console.log(fails ? `${fails} failed` : 'all passed');
process.exit(fails ? 1 : 0);
