// Package attack drives the real llbd as a hostile or careless client,
// operator and KV feed would, on loopback and bounded in time:
// llbsim attack and make attack run it.
//
// A run starts a fresh llbd process (and, where a family needs one, a
// simulated vLLM fleet on its own 127.x addresses) for each attack family:
//
//   - rest: thousands of bad REST requests — mutated valid rules (type
//     confusion, edge numbers, control characters and invalid UTF-8 in
//     strings, deep nesting, duplicate keys, huge arrays and annotations),
//     oversized bodies, wrong content types, unknown paths and methods,
//     controller updates with odd epochs, rule loops;
//   - dataplane: raw HTTP/1.1 and h2c bytes against a rule's VIP —
//     malformed request lines, header bombs, TE+CL smuggling with
//     pipelining, bad chunked bodies, slowloris headers and bodies, bodies
//     over the limit, junk HTTP/2, invalid JSON, huge prompts, forged hop
//     headers, idle connections, streams over HTTP/1.0, h2c :paths a
//     request line cannot carry, clients that never read their streams;
//   - kv: a fake ZMQ publisher where a rule's endpoint publishes KV events —
//     malformed frames, garbage msgpack, oversized frames, bogus sequence
//     numbers, unknown events, floods; against SGLang the same on one of
//     two DP ranks beside an honest one, with SGLang's pages of the wrong
//     size, wrong page hashes and ranks crossing, jumping and going
//     silent; against TensorRT-LLM a hostile
//     POST /kv_cache_events server on the worker's serving port instead —
//     malformed and wrongly shaped drains, bogus event ids, huge, endless,
//     slow and failing answers;
//   - faults: SIGKILL and SIGSTOP of worker processes mid-request, KV
//     publisher restarts.
//
// Every case is derived from the run's seed and its index alone, so a
// defect report (seed, family, case, and the exact bytes) reproduces it.
// Each family has an oracle: what llbd must answer (a 4xx, a documented
// code, a clean close) within which bound, and what must hold after it
// (the process alive and answering, file descriptors, goroutines and RSS
// back near their baseline, counters that account for what was refused,
// no acknowledged write lost).
package attack
