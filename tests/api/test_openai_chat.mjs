// test_openai_chat -- the unmodified `openai` npm client's chat.completions.create
// (Node 20) against the real daemon serving tiny-qwen2 (a ChatML template).
//
// Served with --chat-template chatml (tiny-qwen2's own template is Qwen2's,
// without <tool_call>; naming the family allows Qwen's tool format).
// Non-streamed and streamed (role in the first delta, include_usage), greedy
// chat output equal to greedy completions output on the rendered prompt
// (POST /apply-template), logprobs in the chat format, response_format
// (JSON mode, a strict json_schema), tools (a forced call read by the
// client as message.tool_calls, streamed deltas assembled, a tool result
// sent back), and unsupported
// fields / bad messages surfacing as the client's APIError with status and
// param.
// usage: node test_openai_chat.mjs <inferd binary>; exits 77 when
// node_modules is missing (CI runs `npm ci` in tests/api first).
import { spawn } from 'node:child_process';
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
const MODEL = 'tiny-qwen2-Q4_K_M';
const model = path.join(shared, 'models', MODEL + '.gguf');
if (!exe || !existsSync(exe) || !existsSync(model)) {
  console.log('skip: no inferd binary or model');
  process.exit(77);
}
const MESSAGES = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Name a colour.' },
];

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

const port = await freePort();
let log = '';
const env = { ...process.env };
delete env.NOTIFY_SOCKET;
delete env.INFERD_API_KEY;
const d = spawn(exe, ['serve', '--model', model, '--host', '127.0.0.1', '--port', String(port),
  '--n-ctx', '1024', '--chat-template', 'chatml'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
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

const client = new OpenAI({ apiKey: 'unused', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
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

  await test('chat non-stream = completions on the rendered prompt', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 20, temperature: 0 });
    check(r.object === 'chat.completion' && r.id.startsWith('chatcmpl-'), JSON.stringify(r));
    const m = r.choices[0].message;
    check(m.role === 'assistant' && typeof m.content === 'string', JSON.stringify(m));
    const t = await (await fetch(`http://127.0.0.1:${port}/apply-template`, {
      method: 'POST', body: JSON.stringify({ messages: MESSAGES }),
    })).json();
    const c = await client.completions.create({ model: MODEL, prompt: t.tokens, max_tokens: 20, temperature: 0 });
    check(m.content === c.choices[0].text, `${JSON.stringify(m.content)} != ${JSON.stringify(c.choices[0].text)}`);
    check(r.choices[0].finish_reason === c.choices[0].finish_reason, 'finish_reason');
    check(r.usage.prompt_tokens === t.count && r.usage.completion_tokens === c.usage.completion_tokens, JSON.stringify(r.usage));
  });

  await test('chat stream + include_usage', async () => {
    const full = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 16, temperature: 0 });
    const stream = await client.chat.completions.create({
      model: MODEL, messages: MESSAGES, max_tokens: 16, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let first = null;
    let usage = null;
    let finish = null;
    let chunks = 0;
    for await (const c of stream) {
      chunks++;
      check(c.object === 'chat.completion.chunk', c.object);
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) {
        if (first === null) first = ch.delta;
        text += ch.delta.content || '';
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    check(first && first.role === 'assistant', JSON.stringify(first));
    check(chunks > 3, 'chunks ' + chunks);
    check(text === full.choices[0].message.content, `${JSON.stringify(text)} != ${JSON.stringify(full.choices[0].message.content)}`);
    check(finish === full.choices[0].finish_reason, finish);
    check(usage && usage.total_tokens === full.usage.total_tokens, JSON.stringify(usage));
  });

  await test('chat logprobs, n, seed', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2 });
    const lp = r.choices[0].logprobs.content;
    check(lp.length === r.usage.completion_tokens && lp.every((e) => e.top_logprobs.length === 2 && Array.isArray(e.bytes)), JSON.stringify(lp));
    const a = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 6, n: 2, seed: 5 });
    const b = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 6, n: 2, seed: 5 });
    check(a.choices.length === 2 && a.choices.map((c) => c.message.content).join('|') === b.choices.map((c) => c.message.content).join('|'), 'seeded n=2');
  });

  await test('chat response_format: json_object and a strict json_schema', async () => {
    const schema = {
      type: 'object',
      properties: { colour: { type: 'string', maxLength: 10 }, rgb: { type: 'array', items: { type: 'integer' }, maxItems: 3 } },
      required: ['colour', 'rgb'],
      additionalProperties: false,
    };
    let closed = 0;
    for (const seed of [1, 2, 3]) {
      for (const rf of [{ type: 'json_object' }, { type: 'json_schema', json_schema: { name: 'c', strict: true, schema } }]) {
        const r = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 150, temperature: 1, seed, response_format: rf });
        const c = r.choices[0];
        check(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
        if (c.finish_reason !== 'stop') continue;
        closed++;
        const o = JSON.parse(c.message.content);
        check(typeof o === 'object' && o !== null && !Array.isArray(o), c.message.content);
        if (rf.type === 'json_schema') {
          check(JSON.stringify(Object.keys(o)) === '["colour","rgb"]', c.message.content);
          check(typeof o.colour === 'string' && o.colour.length <= 10, c.message.content);
          check(o.rgb.length <= 3 && o.rgb.every(Number.isInteger), c.message.content);
        }
      }
    }
    check(closed >= 3, `only ${closed} of 6 answers closed their JSON`);
  });

  await test('chat tools: a forced call, streamed, and its result sent back', async () => {
    const tools = [{
      type: 'function',
      function: {
        name: 'get_colour', description: 'A colour by name', strict: true,
        parameters: {
          type: 'object', properties: { name: { type: 'string', maxLength: 10 }, dark: { type: 'boolean' } },
          required: ['name', 'dark'], additionalProperties: false,
        },
      },
    }];
    let called = 0;
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, tools, tool_choice: 'required', max_tokens: 100, temperature: 1, seed });
      const c = r.choices[0];
      check(['tool_calls', 'length'].includes(c.finish_reason), c.finish_reason);
      if (c.finish_reason !== 'tool_calls') continue;
      called++;
      const call = c.message.tool_calls[0];
      check(c.message.content === null && call.type === 'function' && call.function.name === 'get_colour', JSON.stringify(c.message));
      const a = JSON.parse(call.function.arguments);
      check(JSON.stringify(Object.keys(a)) === '["name","dark"]' && a.name.length <= 10 && typeof a.dark === 'boolean', call.function.arguments);
      // streamed: the client's deltas put together give the same call
      const stream = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, tools, tool_choice: 'required', max_tokens: 100, temperature: 1, seed, stream: true });
      let name = '';
      let args = '';
      let finish = null;
      for await (const ch of stream) {
        for (const x of ch.choices) {
          for (const t of x.delta.tool_calls || []) {
            check(t.index === 0, JSON.stringify(t));
            name += t.function?.name || '';
            args += t.function?.arguments || '';
          }
          if (x.finish_reason) finish = x.finish_reason;
        }
      }
      check(name === 'get_colour' && args === call.function.arguments && finish === 'tool_calls', `${name} ${args} ${finish}`);
      // the conversation goes on with the call and its result
      const next = await client.chat.completions.create({
        model: MODEL, tools, max_tokens: 8, temperature: 0,
        messages: [...MESSAGES, c.message, { role: 'tool', tool_call_id: call.id, content: '{"hex": "#ff0000"}' }],
      });
      check(['stop', 'length', 'tool_calls'].includes(next.choices[0].finish_reason), JSON.stringify(next.choices[0]));
    }
    check(called >= 1, `none of 3 forced calls closed in 100 tokens`);
  });

  await test('chat errors are APIError with status and param', async () => {
    const cases = [
      [{ model: MODEL, messages: [] }, 400, 'messages'],
      [{ model: MODEL, messages: [{ role: 'robot', content: 'x' }] }, 400, 'messages[0].role'],
      [{ model: MODEL, messages: [{ role: 'user', content: 7 }] }, 400, 'messages[0].content'],
      [{ model: MODEL, messages: MESSAGES, tools: [{ type: 'function', function: { name: 'no spaces' } }] }, 400, 'tools[0]'],
      [{ model: MODEL, messages: MESSAGES, tool_choice: 'required' }, 400, 'tool_choice'],
      [{ model: MODEL, messages: MESSAGES, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '(?=a)' } } } }, 400, 'response_format'],
      [{ model: 'nope', messages: MESSAGES }, 404, 'model'],
    ];
    for (const [req, status, param] of cases) {
      let err = null;
      try {
        await client.chat.completions.create(req);
      } catch (e) {
        err = e;
      }
      check(err instanceof OpenAI.APIError, 'no APIError for ' + JSON.stringify(req));
      check(err.status === status && err.param === param, `${err.status} ${err.param} for ${JSON.stringify(req)}`);
    }
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
