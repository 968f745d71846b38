// Driver of the openai-node client test: starts two simulated vLLM fleets
// (llbsim fleet) and llbd, posts the rules the tests need through llbd's REST
// API, waits until the rules are serving, runs `node --test` on test/*.test.mjs, and stops
// every process it started, on success, failure, Ctrl-C or SIGTERM.
//
// Usage: node run.mjs            (BIN=<dir of llbd and llbsim>, default ../../bin)
// Environment of the started processes is cleared, so no LLB_*/LOXILB_* knob
// of the caller changes routing under the tests.

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, openSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { createServer } from 'node:net';

const here = dirname(fileURLToPath(import.meta.url));
const bin = resolve(process.env.BIN ?? join(here, '..', '..', 'bin'));
for (const exe of ['llbd', 'llbsim']) {
  if (!existsSync(join(bin, exe))) {
    console.error(`client-test: ${join(bin, exe)} not found; run \`make build\` (or set BIN)`);
    process.exit(2);
  }
}

const work = mkdtempSync(join(tmpdir(), 'llb-client-test-'));
const children = [];
let keepWork = false;

// A random 127.x.y.0/24 family per run, so that concurrent runs (and other
// local services) do not collide; every 127/8 address is loopback on Linux.
const net = 20 + Math.floor(Math.random() * 200);
const ip = (a, host) => `127.${a}.${net}.${host}`;
const pdBase = ip(91, 2); // 2 prefill + 2 decode workers
const spBase = ip(92, 2); // 2 single-pool workers
const deadIP = (host) => ip(93, host); // nothing listens there
const vip = ip(94, 1);
const migBase = (h) => ip(95, h); // migration: one process per worker

const env = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
// llbd: a stream that stays silent for 10 s moves on (the probe, every
// second, usually takes a frozen worker out first).
const llbdEnv = { ...env, LLB_PD_IDLE_TIMEOUT_SEC: '10' };

function start(name, args, childEnv = env) {
  const log = join(work, `${name}.log`);
  const out = join(work, `${name}.out`);
  const child = spawn(join(bin, args[0]), args.slice(1), {
    env: childEnv,
    stdio: ['ignore', openSync(out, 'w'), openSync(log, 'w')],
  });
  child.on('error', (err) => console.error(`client-test: ${name}: ${err.message}`));
  children.push({ name, child, log, out });
  return { log, out, child };
}

async function stopAll() {
  await Promise.all(
    children.map(
      ({ child }) =>
        new Promise((done) => {
          if (child.exitCode !== null || child.signalCode !== null) return done();
          const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
          child.once('exit', () => {
            clearTimeout(t);
            done();
          });
          child.kill('SIGTERM');
        }),
    ),
  );
}

let stopping = false;
async function finish(code) {
  if (stopping) return;
  stopping = true;
  await stopAll();
  if (keepWork) {
    console.error(`client-test: logs kept in ${work}`);
  } else {
    rmSync(work, { recursive: true, force: true });
  }
  process.exit(code);
}
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    keepWork = true;
    finish(130);
  });
}

// freePort returns a port that nothing listens on at host right now (a
// wildcard listener on the same port would also make the rule's bind fail).
function freePort(host) {
  return new Promise((done, fail) => {
    const srv = createServer();
    srv.once('error', fail);
    srv.listen(0, host, () => {
      const { port } = srv.address();
      srv.close(() => done(port));
    });
  });
}

async function until(what, fn, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    await sleep(100);
  }
  throw new Error(`client-test: timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

function exited() {
  const dead = children.find(({ child }) => child.exitCode !== null || child.signalCode !== null);
  if (dead) {
    throw new Error(`client-test: ${dead.name} exited early (${dead.child.exitCode ?? dead.child.signalCode}); see ${dead.log}`);
  }
}

// A fleet prints its rule fragment as JSON on stdout once it serves.
async function fleet(name, args) {
  const f = start(name, ['llbsim', 'fleet', ...args, '--log-level', 'warn']);
  const frag = await until(`${name} to serve`, () => {
    exited();
    return JSON.parse(readFileSync(f.out, 'utf8'));
  });
  frag.pid = f.child.pid;
  return frag;
}

// The migration fleets: every worker its own process, so that a test can
// SIGKILL or SIGSTOP one; 150 ms per token (48 tokens: 7 s or more) so
// that every stream is still under way when the last of 216 starts, even
// on a loaded machine.
const migArgs = ['--http-port', '0', '--no-kv-events', '--itl', '150ms', '--nixl-port', '0'];
async function migrationFleets() {
  const single = await Promise.all([0, 1, 2, 3].map((i) => fleet(`mig-single-${i}`, ['--single', '1', '--base-ip', migBase(10 + i), ...migArgs])));
  // P/D: three processes of one prefill and one decode worker each (a
  // fleet runs both roles); killing one kills a pair.
  const pairs = await Promise.all([0, 1, 2].map((i) => fleet(`mig-pd-${i}`, ['--prefill', '1', '--decode', '1', '--base-ip', migBase(20 + 2 * i), ...migArgs])));
  const workers = (frags) => frags.flatMap((f) => f.endpoints.map((ep) => ({ ...ep, pid: f.pid })));
  const pd = workers(pairs);
  return { single: workers(single), prefill: pd.filter((ep) => ep.ep_role === 1), decode: pd.filter((ep) => ep.ep_role === 2) };
}

async function main() {
  const [pd, sp, mig] = await Promise.all([
    fleet('pd-fleet', ['--prefill', '2', '--decode', '2', '--base-ip', pdBase, '--http-port', '0', '--kv-port', '0', '--nixl-port', '0']),
    fleet('sp-fleet', ['--single', '2', '--base-ip', spBase, '--http-port', '0', '--no-kv-events']),
    migrationFleets(),
  ]);

  const llbd = start('llbd', ['llbd', '--listen', '127.0.0.1:0', '--state-dir', join(work, 'state'), '--log-format', 'json'], llbdEnv);
  const rest = await until('llbd to listen', () => {
    exited();
    for (const line of readFileSync(llbd.log, 'utf8').split('\n')) {
      if (line.includes('"rest api listening"')) return `http://${JSON.parse(line).addr}`;
    }
    return undefined;
  });

  const sa = (port, extra) => ({ externalIP: vip, port, protocol: 'tcp', mode: 4, ...extra });
  const pdKV = { pd_disagg_mode: true, kvExactMode: 1, kvZmqPort: pd.kvZmqPort, kvBlockSize: pd.kvBlockSize, kvHashAlgo: pd.kvHashAlgo, kvWarmupSec: 1 };
  if (pd.kvNoneHashSeed !== undefined) pdKV.kvNoneHashSeed = pd.kvNoneHashSeed;
  const ports = {};
  for (const name of ['single', 'pd', 'singleDead', 'pdCapped', 'pdDead', 'singleMig', 'pdMig']) ports[name] = await freePort(vip);
  // Migration rules: probes every second, down after two failures.
  const migSA = { probeTimeout: 1, probeRetries: 2, max_stream_duration_sec: 120 };
  const rules = [
    { serviceArguments: sa(ports.single, { sel: 8, name: 'single' }), endpoints: sp.endpoints },
    { serviceArguments: sa(ports.pd, { ...pdKV, name: 'pd' }), endpoints: pd.endpoints },
    {
      serviceArguments: sa(ports.singleDead, { name: 'single-dead' }),
      endpoints: [2, 3].map((h) => ({ endpointIP: deadIP(h), targetPort: 8000, weight: 1 })),
    },
    { serviceArguments: sa(ports.pdCapped, { pd_disagg_mode: true, fc_prefill_max_inflight: 1, name: 'pd-capped' }), endpoints: pd.endpoints },
    {
      serviceArguments: sa(ports.pdDead, { pd_disagg_mode: true, name: 'pd-dead' }),
      endpoints: [
        { endpointIP: deadIP(4), targetPort: 8100, weight: 1, ep_role: 1 },
        { endpointIP: deadIP(5), targetPort: 8100, weight: 1, ep_role: 2 },
      ],
    },
    { serviceArguments: sa(ports.singleMig, { ...migSA, name: 'single-mig' }), endpoints: mig.single.map(({ pid, ...ep }) => ep) },
    {
      serviceArguments: sa(ports.pdMig, { ...migSA, pd_disagg_mode: true, name: 'pd-mig' }),
      endpoints: [...mig.prefill, ...mig.decode].map(({ pid, ...ep }) => ep),
    },
  ];
  for (const r of rules) {
    const res = await fetch(`${rest}/netlox/v1/config/loadbalancer`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(r),
    });
    const body = await res.text();
    if (res.status !== 200) throw new Error(`client-test: POST rule ${r.serviceArguments.name}: ${res.status} ${body}`);
  }

  // Serving: every endpoint of a live rule probed up, every endpoint of a
  // dead rule probed down, the P/D rule's KV feeds connected.
  const status = async (port) => {
    const res = await fetch(`${rest}/netlox/v1/config/loadbalancer/externalipaddress/${vip}/port/${port}/protocol/tcp/status`);
    if (res.status !== 200) return undefined;
    return res.json();
  };
  const probed = (want) => async (port) => {
    const st = await status(port);
    return st?.endpoints?.length > 0 && st.endpoints.every((e) => e.probe === want) && !st.listenError && !st.applyError;
  };
  for (const port of [ports.single, ports.pd, ports.pdCapped, ports.singleMig, ports.pdMig]) await until(`rule ${port} up`, () => probed('up')(port));
  for (const port of [ports.singleDead, ports.pdDead]) await until(`rule ${port} down`, () => probed('down')(port));
  await until('the P/D rule to mirror KV feeds', async () => {
    for (const ep of [0, 1]) {
      const res = await fetch(`${rest}/netlox/v1/config/ai/kv/inventory?service_id=tcp:${vip}:${ports.pd}&ep_idx=${ep}&limit=1`);
      if (res.status !== 200) return false;
      const v = await res.json();
      if (!v.llb?.ranks?.every((r) => r.feed?.connected)) return false;
    }
    return true;
  });

  const testEnv = {
    ...process.env,
    LLB_TEST_VIP: vip,
    LLB_TEST_PORTS: JSON.stringify(ports),
    LLB_TEST_PD_WORKERS: JSON.stringify(pd.endpoints),
    LLB_TEST_SP_WORKERS: JSON.stringify(sp.endpoints),
    LLB_TEST_MODEL: 'sim-model',
    LLB_TEST_REST: rest,
    LLB_TEST_MIG_WORKERS: JSON.stringify(mig),
  };
  console.log(`client-test: llbd ${rest}, rules on ${vip}:${Object.values(ports).join(',')}, logs in ${work}`);
  // One file after the other: the migration tests time worker kills
  // against streams under way, which a second file's load would skew.
  let code = 0;
  for (const f of ['llb.test.mjs', 'apis.test.mjs']) {
    const c = await new Promise((done) => {
      const t = spawn(process.execPath, ['--test', '--test-reporter=spec', join(here, 'test', f)], { env: testEnv, stdio: 'inherit' });
      children.push({ name: `node --test ${f}`, child: t, log: '(stdout)' });
      t.on('exit', (c, sig) => done(c ?? (sig ? 1 : 0)));
    });
    code ||= c;
  }
  return code;
}

main()
  .then((code) => {
    if (code !== 0) keepWork = true;
    return finish(code);
  })
  .catch((err) => {
    console.error(err.message);
    keepWork = true;
    return finish(1);
  });
