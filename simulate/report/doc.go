// Package report turns routing measurements into the report `make sim`
// writes: a markdown page (method, targets, per-scenario tables, the ε and
// λ sweeps with their best settings and where the adaptive laws sit) and
// SVG figures (TTFT, hit rate and throughput against load per strategy; ε
// and λ heat maps with the adaptive curve on top).
//
// Its input is a small results schema, JSON lines (schema.go): one meta
// line, one line per scenario, one per run. The discrete-event simulator
// (llbsim sweep) writes it; a load harness driving the real llbd over HTTP
// can write the same lines (Source "http") and get the same tables and
// figures from `llbsim report`. A run carries only what a harness can
// observe (latencies, throughput, the workers' prefix-cache hit rate, the
// tier mix from X-Llb-Route) plus optional simulator-only fields.
//
// Everything here is a pure function of the dataset, except Write, which
// creates the files.
package report
