// The official SDKs on vLLM's other APIs through llbd: the openai client's
// Responses API (responses.create, streamed and not, a previous_response_id
// chain, responses.retrieve) and embeddings, and @anthropic-ai/sdk's
// messages.create, streamed and not. Run through ../run.mjs, or by llbd's Go
// e2e test (TestE2E_OfficialSDKsThroughLLBD), which start the workers and
// llbd and pass the rule's address in the environment (LLB_TEST_VIP,
// LLB_TEST_PORTS.single: a single-pool rule over two simulated vLLM workers
// with their Responses store on).

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const vip = process.env.LLB_TEST_VIP;
const ports = JSON.parse(process.env.LLB_TEST_PORTS ?? '{}');
const model = process.env.LLB_TEST_MODEL ?? 'sim-model';
if (!vip || !ports.single) throw new Error('run this test through run.mjs (LLB_TEST_VIP or LLB_TEST_PORTS.single is not set)');

const base = `http://${vip}:${ports.single}`;
// maxRetries 0: an answer must be llb's, not the client's retry of it.
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sk-llb-sdk-test', maxRetries: 0, timeout: 30_000 });
const anthropic = new Anthropic({ baseURL: base, apiKey: 'sk-ant-llb-sdk-test', maxRetries: 0, timeout: 30_000 });

const MAX = 6;
const routed = (h) => assert.match(h ?? '', /^tier=\S+ .*prefill=[01] /, `X-Llb-Route ${h}`);

describe('openai: the Responses API', () => {
  it('responses.create: a completed response with its output text and usage', async () => {
    const { data, response } = await openai.responses
      .create({ model, instructions: 'You are brief.', input: 'Where is my parcel?', max_output_tokens: MAX })
      .withResponse();
    routed(response.headers.get('x-llb-route'));
    assert.equal(data.object, 'response');
    assert.equal(data.status, 'completed');
    assert.match(data.id, /^resp_/);
    assert.equal(data.model, model);
    assert.ok(data.output_text.length > 0, 'output_text');
    assert.equal(data.output[0].type, 'message');
    assert.equal(data.output[0].role, 'assistant');
    assert.ok(data.usage.input_tokens > 0, `input_tokens ${data.usage.input_tokens}`);
    assert.equal(data.usage.output_tokens, MAX);
    assert.equal(data.usage.total_tokens, data.usage.input_tokens + data.usage.output_tokens);
  });

  it('responses.create, streamed: created, one text delta per token, completed', async () => {
    const stream = await openai.responses.create({ model, input: 'Can I return a blender?', max_output_tokens: MAX, stream: true });
    const types = [];
    let text = '';
    let done = null;
    let created = null;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'response.created') created = ev.response;
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.output_text.done') assert.equal(ev.text, text);
      if (ev.type === 'response.completed') done = ev.response;
    }
    assert.equal(types[0], 'response.created');
    assert.equal(types.at(-1), 'response.completed');
    assert.equal(types.filter((t) => t === 'response.output_text.delta').length, MAX, types.join(','));
    assert.ok(text.length > 0, 'streamed text');
    assert.ok(created && done && created.id === done.id, 'one response id from created to completed');
    assert.equal(done.usage.output_tokens, MAX);
  });

  it('a previous_response_id chain: every turn is found by the worker that stores it', async () => {
    // Two workers, each with its own store: a turn sent to the other one
    // would be answered 404 "Response with id … not found".
    let prev;
    const where = new Set();
    for (let turn = 0; turn < 6; turn++) {
      const req = { model, input: `turn ${turn}`, max_output_tokens: 2, ...(prev ? { previous_response_id: prev } : {}) };
      if (turn % 2 === 1) {
        const stream = await openai.responses.create({ ...req, stream: true });
        let id;
        for await (const ev of stream) if (ev.type === 'response.completed') id = ev.response.id;
        assert.ok(id, `turn ${turn}: no response.completed`);
        prev = id;
      } else {
        const { data, response } = await openai.responses.create(req).withResponse();
        where.add(response.headers.get('x-llb-route').match(/prefill=(\d+)/)[1]);
        prev = data.id;
      }
    }
    assert.equal(where.size, 1, `the chain's turns went to endpoints ${[...where]}`);
    const got = await openai.responses.retrieve(prev);
    assert.equal(got.id, prev);
    assert.equal(got.status, 'completed');
  });

  it('an unknown model is the client\'s NotFoundError, as vLLM answers it', async () => {
    await assert.rejects(openai.responses.create({ model: 'no-such-model', input: 'hi' }), (err) => {
      assert.ok(err instanceof OpenAI.NotFoundError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 404);
      assert.equal(err.type, 'NotFoundError');
      assert.match(err.message, /The model `no-such-model` does not exist/);
      return true;
    });
  });
});

describe('openai: embeddings', () => {
  it('embeddings.create: one vector per input (the client asks for base64 and decodes it)', async () => {
    const { data, response } = await openai.embeddings.create({ model, input: ['first text', 'second text'] }).withResponse();
    routed(response.headers.get('x-llb-route'));
    assert.equal(data.object, 'list');
    assert.equal(data.data.length, 2);
    for (const [i, e] of data.data.entries()) {
      assert.equal(e.object, 'embedding');
      assert.equal(e.index, i);
      assert.ok(Array.isArray(e.embedding) && e.embedding.length > 0, 'a decoded vector');
      assert.ok(e.embedding.every(Number.isFinite));
    }
    assert.notDeepEqual(data.data[0].embedding, data.data[1].embedding);
    assert.ok(data.usage.prompt_tokens > 0);
  });

  it('embeddings.create with encoding_format float', async () => {
    const data = await openai.embeddings.create({ model, input: 'one text', encoding_format: 'float' });
    assert.equal(data.data.length, 1);
    assert.ok(data.data[0].embedding.length > 0 && data.data[0].embedding.every(Number.isFinite));
  });
});

describe('@anthropic-ai/sdk: the Messages API', () => {
  const messages = [{ role: 'user', content: 'Where is my invoice?' }];

  it('messages.create: an assistant message with text, stop_reason and usage', async () => {
    const { data, response } = await anthropic.messages
      .create({ model, system: 'You are brief.', max_tokens: MAX, messages })
      .withResponse();
    routed(response.headers.get('x-llb-route'));
    assert.equal(data.type, 'message');
    assert.equal(data.role, 'assistant');
    assert.equal(data.model, model);
    assert.equal(data.content[0].type, 'text');
    assert.ok(data.content[0].text.length > 0);
    assert.equal(data.stop_reason, 'max_tokens');
    assert.ok(data.usage.input_tokens > 0);
    assert.equal(data.usage.output_tokens, MAX);
  });

  it('messages.create, streamed: message_start … text deltas … message_stop', async () => {
    const stream = await anthropic.messages.create({ model, max_tokens: MAX, messages, stream: true });
    const types = [];
    let text = '';
    let stop = null;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
      if (ev.type === 'message_delta') stop = ev.delta.stop_reason;
    }
    assert.equal(types[0], 'message_start');
    assert.equal(types.at(-1), 'message_stop');
    assert.ok(types.includes('content_block_start') && types.includes('content_block_stop'), types.join(','));
    assert.ok(text.length > 0, 'streamed text');
    assert.equal(stop, 'max_tokens');
  });

  it('messages.stream: the helper assembles the final message', async () => {
    const stream = anthropic.messages.stream({ model, max_tokens: MAX, messages });
    let deltas = '';
    stream.on('text', (t) => {
      deltas += t;
    });
    const msg = await stream.finalMessage();
    assert.equal(msg.role, 'assistant');
    assert.equal(msg.content[0].text, deltas);
    assert.equal(msg.usage.output_tokens, MAX);
  });

  it('an unknown model is the client\'s NotFoundError in Anthropic\'s shape', async () => {
    await assert.rejects(anthropic.messages.create({ model: 'no-such-model', max_tokens: 1, messages }), (err) => {
      assert.ok(err instanceof Anthropic.NotFoundError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 404);
      assert.equal(err.error?.type, 'error');
      assert.equal(err.error?.error?.type, 'NotFoundError');
      return true;
    });
  });
});
