// The official openai npm client against llbd. Run through ../run.mjs, which
// starts the simulated workers and llbd and passes the rule addresses in the
// environment (LLB_TEST_*).

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const vip = process.env.LLB_TEST_VIP;
const ports = JSON.parse(process.env.LLB_TEST_PORTS ?? '{}');
const model = process.env.LLB_TEST_MODEL ?? 'sim-model';
const pdWorkers = JSON.parse(process.env.LLB_TEST_PD_WORKERS ?? '[]');
const spWorkers = JSON.parse(process.env.LLB_TEST_SP_WORKERS ?? '[]');
if (!vip) throw new Error('run this test through run.mjs (LLB_TEST_VIP is not set)');

// maxRetries 0: an error must surface as llb sent it, not after the client's
// own retries.
const client = (port) =>
  new OpenAI({ baseURL: `http://${vip}:${port}/v1`, apiKey: 'sk-llb-client-test', maxRetries: 0, timeout: 30_000 });

// A system prompt of several 16-token blocks, so that KV-exact routing has
// something to match.
const system =
  'You are the support assistant of the Example Corporation. You answer questions about products, ' +
  'orders, shipping, returns and invoices. Be brief and precise, and end with a one line summary.';

const MAX = 6;

// setFaults sets the simulated worker's fault injection (POST /_sim/faults).
async function setFaults(w, body) {
  const res = await fetch(`http://${w.endpointIP}:${w.targetPort}/_sim/faults`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  assert.equal(res.status, 200, `faults on ${w.endpointIP}:${w.targetPort}: ${await res.text()}`);
}

function checkUsage(usage, completionTokens) {
  assert.ok(usage, 'usage is present');
  assert.ok(Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens > 0, `prompt_tokens ${usage.prompt_tokens}`);
  assert.equal(usage.completion_tokens, completionTokens);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
}

// readSSE returns the data payloads of a raw text/event-stream response.
async function readSSE(response) {
  assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);
  const text = await response.text();
  return text
    .split('\n\n')
    .map((ev) => ev.trim())
    .filter((ev) => ev !== '')
    .map((ev) => {
      assert.match(ev, /^data: /, `SSE event ${JSON.stringify(ev)}`);
      return ev.slice('data: '.length);
    });
}

// Shapes every rule must serve identically, single pool or P/D. route checks
// the X-Llb-Route header.
function generationSuite(port, route) {
  const c = client(port);

  it('completions: the response parses, with choices and usage', async () => {
    const { data, response } = await c.completions
      .create({ model, prompt: `${system} Question: where is my parcel?`, max_tokens: MAX })
      .withResponse();
    route(response.headers.get('x-llb-route'));
    assert.equal(data.object, 'text_completion');
    assert.equal(data.model, model);
    assert.equal(data.choices.length, 1);
    assert.equal(data.choices[0].index, 0);
    assert.equal(typeof data.choices[0].text, 'string');
    assert.ok(data.choices[0].text.length > 0);
    assert.equal(data.choices[0].finish_reason, 'length');
    checkUsage(data.usage, MAX);
  });

  it('completions, streamed: deltas, the usage chunk, and the iterator ends at [DONE]', async () => {
    const stream = await c.completions.create({
      model,
      prompt: `${system} Question: can I return a blender?`,
      max_tokens: MAX,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let pieces = 0;
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'text_completion');
      for (const ch of chunk.choices) {
        if (ch.text) pieces++;
        text += ch.text;
        if (ch.finish_reason) finish = ch.finish_reason;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    assert.ok(text.length > 0, 'streamed text');
    assert.equal(pieces, MAX, 'one text delta per token');
    assert.equal(finish, 'length');
    checkUsage(usage, MAX);
  });

  it('completions, streamed: the raw stream ends with data: [DONE] and nothing after it', async () => {
    const response = await c.completions
      .create({ model, prompt: `${system} Question: do you ship abroad?`, max_tokens: MAX, stream: true })
      .asResponse();
    assert.equal(response.status, 200);
    route(response.headers.get('x-llb-route'));
    const events = await readSSE(response);
    assert.equal(events.at(-1), '[DONE]');
    assert.equal(events.filter((e) => e === '[DONE]').length, 1);
    for (const e of events.slice(0, -1)) JSON.parse(e);
  });

  it('chat: the response parses, with the assistant message and usage', async () => {
    const { data, response } = await c.chat.completions
      .create({
        model,
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: 'Where is my invoice?' },
        ],
        max_tokens: MAX,
      })
      .withResponse();
    route(response.headers.get('x-llb-route'));
    assert.equal(data.object, 'chat.completion');
    assert.equal(data.choices.length, 1);
    assert.equal(data.choices[0].message.role, 'assistant');
    assert.equal(typeof data.choices[0].message.content, 'string');
    assert.ok(data.choices[0].message.content.length > 0);
    assert.equal(data.choices[0].finish_reason, 'length');
    checkUsage(data.usage, MAX);
  });

  it('chat, streamed: role delta, content deltas, finish_reason, usage', async () => {
    const stream = await c.chat.completions.create({
      model,
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: 'Can I change my delivery address?' },
      ],
      max_tokens: MAX,
      stream: true,
      stream_options: { include_usage: true },
    });
    let role = null;
    let content = '';
    let pieces = 0;
    let finish = null;
    let usage = null;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      assert.equal(chunk.object, 'chat.completion.chunk');
      for (const ch of chunk.choices) {
        if (ch.delta.role) role = ch.delta.role;
        if (ch.delta.content) {
          pieces++;
          content += ch.delta.content;
        }
        if (ch.finish_reason) finish = ch.finish_reason;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(role, 'assistant');
    assert.ok(content.length > 0, 'streamed content');
    assert.equal(pieces, MAX, 'one content delta per token');
    assert.equal(finish, 'length');
    assert.ok(chunks > MAX, `${chunks} chunks`);
    checkUsage(usage, MAX);
  });

  it('a bad request is a BadRequestError with llb\'s type, code and param', async () => {
    await assert.rejects(
      c.completions.create({ model, prompt: { not: 'a prompt' }, max_tokens: MAX }),
      (err) => {
        assert.ok(err instanceof OpenAI.BadRequestError, `${err?.constructor?.name}: ${err?.message}`);
        assert.equal(err.status, 400);
        assert.equal(err.type, 'invalid_request_error');
        assert.equal(err.code, 'invalid_field');
        assert.equal(err.param, 'prompt');
        assert.match(err.headers.get('x-llb-route') ?? '', /^tier=none error=invalid_field$/);
        return true;
      },
    );
  });
}

describe('single pool (sel:8 CHWBL), two workers', () => {
  const c = client(ports.single);
  const route = (h) => assert.match(h ?? '', /^tier=sel sel=chwbl prefill=[01] decode=-1 .*prefill_addr=\S+ retries=0$/);

  generationSuite(ports.single, route);

  it('models.list passes through to a worker', async () => {
    const page = await c.models.list();
    assert.ok(page.data.some((m) => m.id === model), JSON.stringify(page.data));
  });

  it('a stream cut by the worker mid-way makes the client fail, not end cleanly', async () => {
    const drop = { drop_next: 1, drop_mode: 'mid_stream', drop_after_tokens: 2 };
    try {
      for (const w of spWorkers) await setFaults(w, drop);
      const stream = await c.chat.completions.create({
        model,
        messages: [{ role: 'user', content: 'Tell me a story.' }],
        max_tokens: 50,
        stream: true,
      });
      let pieces = 0;
      await assert.rejects(async () => {
        for await (const chunk of stream) {
          if (chunk.choices[0]?.delta?.content) pieces++;
        }
      });
      assert.ok(pieces >= 1 && pieces < 50, `${pieces} content deltas before the cut`);
    } finally {
      for (const w of spWorkers) await setFaults(w, { clear: true });
    }
  });
});

describe('P/D (kvExactMode 1), two prefill and two decode workers', () => {
  const route = (h) =>
    assert.match(h ?? '', /^tier=(0|1\.5|2) prefill=[01] decode=[23] .*prefill_addr=\S+ decode_addr=\S+ retries=0( kv_predicted=\d+( kv_cached=\d+)?)?$/);

  generationSuite(ports.pd, route);

  it('a conversation stays on its prefill/decode pair (Tier 0)', async () => {
    const c = client(ports.pd);
    const headers = { 'X-Conversation-Id': `conv-${process.pid}` };
    const messages = [
      { role: 'system', content: system },
      { role: 'user', content: 'Hello!' },
    ];
    const first = await c.chat.completions.create({ model, messages, max_tokens: MAX }, { headers }).withResponse();
    const r1 = first.response.headers.get('x-llb-route');
    assert.match(r1, /via=session_miss/);
    messages.push(first.data.choices[0].message, { role: 'user', content: 'And my order?' });
    const second = await c.chat.completions.create({ model, messages, max_tokens: MAX }, { headers }).withResponse();
    const r2 = second.response.headers.get('x-llb-route');
    assert.match(r2, /^tier=0 /);
    const addrs = (r) => r.match(/prefill_addr=\S+ decode_addr=\S+/)[0];
    assert.equal(addrs(r2), addrs(r1));
  });

  it('all prefill endpoints at their cap: a RateLimitError with pd_overloaded and Retry-After', async () => {
    const c = client(ports.pdCapped);
    const prefill = pdWorkers.filter((w) => w.ep_role === 1);
    try {
      // Hold each prefill worker's one allowed request for 2 s.
      for (const w of prefill) await setFaults(w, { latency_ms: 2000 });
      const held = prefill.map((_, i) =>
        c.completions.create({ model, prompt: `${system} held ${i}`, max_tokens: 1 }),
      );
      await new Promise((r) => setTimeout(r, 500));
      await assert.rejects(c.completions.create({ model, prompt: `${system} one more`, max_tokens: 1 }), (err) => {
        assert.ok(err instanceof OpenAI.RateLimitError, `${err?.constructor?.name}: ${err?.message}`);
        assert.equal(err.status, 429);
        assert.equal(err.type, 'pd_overloaded');
        assert.equal(err.code, 'pd_overloaded');
        assert.equal(err.headers.get('retry-after'), '1');
        assert.match(err.headers.get('x-llb-route') ?? '', /via=all_capped admission=shed/);
        return true;
      });
      await Promise.all(held);
    } finally {
      for (const w of prefill) await setFaults(w, { clear: true });
    }
  });
});

describe('no healthy endpoint: 503 surfaces as the client\'s APIError', () => {
  it('single pool: InternalServerError 503 no_healthy_backend', async () => {
    await assert.rejects(
      client(ports.singleDead).chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: MAX }),
      (err) => {
        assert.ok(err instanceof OpenAI.APIError);
        assert.ok(err instanceof OpenAI.InternalServerError, err?.constructor?.name);
        assert.equal(err.status, 503);
        assert.equal(err.type, 'no_healthy_backend');
        assert.equal(err.code, 'no_healthy_backend');
        assert.equal(err.param, null);
        assert.match(err.message, /^503 no healthy endpoint is available/);
        assert.match(err.headers.get('x-llb-route') ?? '', /unavailable=no_healthy_backend/);
        return true;
      },
    );
  });

  it('P/D: InternalServerError 503 pd_pool_unavailable, also for a streamed request', async () => {
    const c = client(ports.pdDead);
    for (const stream of [false, true]) {
      await assert.rejects(
        c.completions.create({ model, prompt: `${system} anyone there?`, max_tokens: MAX, stream }),
        (err) => {
          assert.ok(err instanceof OpenAI.InternalServerError, err?.constructor?.name);
          assert.equal(err.status, 503);
          assert.equal(err.type, 'pd_pool_unavailable');
          assert.equal(err.code, 'pd_pool_unavailable');
          assert.match(err.headers.get('x-llb-route') ?? '', /unavailable=pd_pool_unavailable/);
          return true;
        },
      );
    }
  });
});


// ---- Request migration (issue 28) ------------------------------------------
//
// 200 streams over four worker processes (single pool), then over three
// processes of a prefill and a decode worker each (P/D); once every stream
// is under way one process is SIGKILLed and another SIGSTOPped. Every
// stream must end whole: the SDK reports no error, each chat stream has one
// role delta, every stream its full token count and a finish_reason; half
// of them are read raw, where the SSE sequence must carry one id and end
// with exactly one [DONE]; and the text is exactly what an undisturbed
// worker generates for the same request. Streams that cannot be continued
// (echo) are cut when their worker dies, and counted.

const rest = process.env.LLB_TEST_REST;
const mig = JSON.parse(process.env.LLB_TEST_MIG_WORKERS ?? '{}');
const MIG_STREAMS = 200;
const MIG_UNSUPPORTED = 16;
const MIG_TOKENS = 48;
const addrOf = (w) => `${w.endpointIP}:${w.targetPort}`;

// migrations reads llb_migrations_total{outcome} of the rule on port.
async function migrations(port, outcome) {
  const text = await (await fetch(`${rest}/metrics`)).text();
  const want = `llb_migrations_total{service="tcp:${vip}:${port}",outcome="${outcome}"} `;
  const line = text.split('\n').find((l) => l.startsWith(want));
  return line ? Number(line.slice(want.length)) : 0;
}

// reference asks an undisturbed worker for the whole answer.
async function reference(w, chat, prompt) {
  const path = chat ? 'chat/completions' : 'completions';
  const body = chat
    ? { model, messages: [{ role: 'user', content: prompt }], max_tokens: MIG_TOKENS }
    : { model, prompt, max_tokens: MIG_TOKENS };
  const res = await fetch(`http://${addrOf(w)}/v1/${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const v = await res.json();
  return chat ? v.choices[0].message.content : v.choices[0].text;
}

// oneStream runs stream i: chat or completions, through the SDK or read
// raw; started is called after its third token.
async function oneStream(c, port, i, unsupported, started) {
  const chat = !unsupported && i % 2 === 1;
  const sdk = unsupported || i % 4 < 2;
  const prompt = `${system} Migration question ${i}: count from ${i} to ${i + MIG_TOKENS}.`;
  const r = { i, chat, sdk, prompt, unsupported, text: '', pieces: 0, roles: 0, finish: null, done: 0, ids: new Set(), error: null, route: '' };
  let signalled = false;
  const piece = (p) => {
    if (!p) return;
    r.text += p;
    r.pieces++;
    if (r.pieces === 3 && !signalled) {
      signalled = true;
      started();
    }
  };
  try {
    if (sdk) {
      const params = { model, max_tokens: MIG_TOKENS, stream: true };
      const create = chat
        ? c.chat.completions.create({ ...params, messages: [{ role: 'user', content: prompt }] })
        : c.completions.create({ ...params, prompt, ...(unsupported ? { echo: true } : {}) });
      const { data: stream, response } = await create.withResponse();
      r.route = response.headers.get('x-llb-route') ?? '';
      for await (const chunk of stream) {
        r.ids.add(`${chunk.id}/${chunk.created}/${chunk.model}`);
        for (const ch of chunk.choices) {
          if (ch.delta?.role) r.roles++;
          piece(chat ? ch.delta?.content : ch.text);
          if (ch.finish_reason) r.finish = ch.finish_reason;
        }
      }
    } else {
      const path = chat ? 'chat/completions' : 'completions';
      const body = chat
        ? { model, messages: [{ role: 'user', content: prompt }], max_tokens: MIG_TOKENS, stream: true }
        : { model, prompt, max_tokens: MIG_TOKENS, stream: true };
      const res = await fetch(`http://${vip}:${port}/v1/${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      r.route = res.headers.get('x-llb-route') ?? '';
      assert.equal(res.status, 200);
      const dec = new TextDecoder();
      let buf = '';
      for await (const bytes of res.body) {
        buf += dec.decode(bytes, { stream: true });
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          assert.match(ev, /^data: /, `event ${JSON.stringify(ev)}`);
          const data = ev.slice('data: '.length);
          if (r.done > 0) throw new Error(`an event after [DONE]: ${data}`);
          if (data === '[DONE]') {
            r.done++;
            continue;
          }
          const chunk = JSON.parse(data);
          r.ids.add(`${chunk.id}/${chunk.created}/${chunk.model}`);
          for (const ch of chunk.choices) {
            if (ch.delta?.role) r.roles++;
            piece(chat ? ch.delta?.content : ch.text);
            if (ch.finish_reason) r.finish = ch.finish_reason;
          }
        }
      }
      assert.equal(buf, '', 'the stream ends with a whole event');
    }
  } catch (err) {
    r.error = err;
  }
  if (!signalled) started();
  r.ended = Date.now();
  return r;
}

// migrationRun runs the streams on port, kills one process and stops
// another once all are under way, and checks every stream. onDead tells
// whether a stream's route header names a worker of those processes.
async function migrationRun(port, kill, stop, onDead) {
  const c = new OpenAI({ baseURL: `http://${vip}:${port}/v1`, apiKey: 'sk-llb-client-test', maxRetries: 0, timeout: 120_000 });
  const before = { migrated: await migrations(port, 'migrated'), unsupported: await migrations(port, 'unsupported') };
  let under = 0;
  const runs = [];
  for (let i = 0; i < MIG_STREAMS + MIG_UNSUPPORTED; i++) runs.push(oneStream(c, port, i, i >= MIG_STREAMS, () => under++));
  const deadline = Date.now() + 60_000;
  while (under < runs.length) {
    assert.ok(Date.now() < deadline, `only ${under} of ${runs.length} streams under way within 60 s`);
    await new Promise((done) => setTimeout(done, 20));
  }
  const killedAt = Date.now();
  process.kill(kill, 'SIGKILL');
  process.kill(stop, 'SIGSTOP');
  let results;
  try {
    results = await Promise.all(runs);
  } finally {
    process.kill(stop, 'SIGCONT');
  }
  const ref = mig.single[2]; // never disturbed
  const want = await Promise.all(results.map((r) => (r.unsupported ? null : reference(ref, r.chat, r.prompt))));
  let moved = 0;
  let cut = 0;
  let endedBefore = 0;
  for (const r of results) {
    const what = `stream ${r.i} (${r.sdk ? 'SDK' : 'raw'} ${r.chat ? 'chat' : 'completion'}, ${r.route})`;
    // A stream that ended before the kill was not under way on it.
    const onDeadWorker = (route) => r.ended >= killedAt && onDead(route);
    if (r.ended < killedAt) endedBefore++;
    if (r.unsupported) {
      if (onDeadWorker(r.route)) {
        assert.ok(r.error, `${what} cannot be continued and its worker died: it must fail`);
        cut++;
      }
      continue;
    }
    if (onDeadWorker(r.route)) moved++;
    assert.equal(r.error, null, `${what}: ${r.error?.stack ?? r.error}`);
    assert.equal(r.pieces, MIG_TOKENS, `${what}: token deltas`);
    assert.equal(r.finish, 'length', `${what}: finish_reason`);
    assert.equal(r.ids.size, 1, `${what}: ids ${[...r.ids]}`);
    if (r.chat) assert.equal(r.roles, 1, `${what}: role deltas`);
    if (!r.sdk) assert.equal(r.done, 1, `${what}: [DONE]`);
    assert.equal(r.text, want[r.i], `${what}: text`);
  }
  assert.ok(moved > 0, 'no stream was on the killed or the stopped worker');
  const migrated = (await migrations(port, 'migrated')) - before.migrated;
  const unsupported = (await migrations(port, 'unsupported')) - before.unsupported;
  assert.ok(migrated >= moved, `${migrated} migrations for ${moved} streams on the dead workers`);
  assert.equal(unsupported, cut, 'streams that cannot be continued, cut and counted');
  console.log(`  migration on port ${port}: ${MIG_STREAMS} streams (${endedBefore} ended before the kill), ${moved} under way on the dead workers moved (${migrated} migrations), ${cut} that cannot be continued cut`);
}

describe('migration: streams survive a SIGKILLed and a SIGSTOPped worker', () => {
  it('single pool: four worker processes', { timeout: 180_000 }, async () => {
    const dead = new Set([addrOf(mig.single[0]), addrOf(mig.single[1])]);
    await migrationRun(ports.singleMig, mig.single[0].pid, mig.single[1].pid, (route) => {
      const m = /prefill_addr=(\S+)/.exec(route);
      return m !== null && dead.has(m[1]);
    });
  });

  it('P/D: three processes of a prefill and a decode worker', { timeout: 180_000 }, async () => {
    const dead = new Set([addrOf(mig.decode[0]), addrOf(mig.decode[1])]);
    await migrationRun(ports.pdMig, mig.decode[0].pid, mig.decode[1].pid, (route) => {
      const m = /decode_addr=(\S+)/.exec(route);
      return m !== null && dead.has(m[1]);
    });
  });
});
