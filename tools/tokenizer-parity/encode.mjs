// encode.mjs: the reference side of make tokenizer-parity for token ids.
// Reads JSON lines {"dir", "text", "add_special_tokens"} on stdin and
// writes {"ids": [...]} (or {"error": "..."}) per line on stdout, using
// transformers.js (@huggingface/transformers) on the tokenizer directory.
import { AutoTokenizer, env } from '@huggingface/transformers';
import { createInterface } from 'node:readline';
import path from 'node:path';

env.allowRemoteModels = false;
env.localModelPath = '';

const cache = new Map();
async function load(dir) {
  const abs = path.resolve(dir);
  if (!cache.has(abs)) cache.set(abs, await AutoTokenizer.from_pretrained(abs));
  return cache.get(abs);
}

const out = [];
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (!line.trim()) continue;
  const req = JSON.parse(line);
  try {
    const tok = await load(req.dir);
    out.push(JSON.stringify({ ids: tok.encode(req.text, { add_special_tokens: req.add_special_tokens }) }));
  } catch (e) {
    out.push(JSON.stringify({ error: String(e) }));
  }
  if (out.length >= 256) { process.stdout.write(out.join('\n') + '\n'); out.length = 0; }
}
if (out.length) process.stdout.write(out.join('\n') + '\n');
