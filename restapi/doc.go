// Package restapi is llb's LoxiLB-compatible control plane: the
// /netlox/v1/config/loadbalancer routes on :11111, LoxiLB's JSON decoding and
// error shapes, the status/stats views, /metrics, and bearer-token
// authentication. What a rule means — its model, defaults and validation —
// is package rule's; where it is stored, how a write merges (oper 0/1/2) and
// how it reaches the data plane is package catalog's. restapi translates
// LoxiLB's JSON and answers HTTP.
//
// The flow of one configuration change:
//
//	POST body → DecodeEntry (JSON shape, every type problem at once)
//	          → rule.Validate (every schema and semantic problem at once)
//	          → rule.NormalizeEntry → rule.Rule (key, id, effective values)
//	          → catalog.Write: Rules.Upsert (pure: a Change value, or a
//	            conflict), restapi's limits and loop checks, the state file
//	            (atomic, durable) → publish → Runtime.Apply
//
// The data plane is reached only through the small Runtime interface; a
// Runtime that also implements one of the optional view interfaces gets the
// matching extra routes: InventoryViewer the KV inventory view
// (GET /netlox/v1/config/ai/kv/inventory), ControllerRuntime the external
// controller routes (POST …/config/ai/controller/endpoint, GET
// …/config/ai/controller). restapi imports nothing of the data plane (and so
// neither libzmq): those interfaces speak restapi's own types.
//
// Wire compatibility notes that differ from LoxiLB on purpose are collected in
// docs/rest-api.md; the code cites them where they happen.
package restapi
