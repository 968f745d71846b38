// Package rule is llb's one model of a load-balancer rule: what a rule is,
// what every field means, its defaults, its enums and its limits, the one
// Validate that reports every problem at once, and the compilation of a
// valid rule into what the data plane runs. A rule this package accepts
// always runs; a rule it refuses is refused with every problem named by its
// field.
//
// The model's shape is LoxiLB's LoadbalanceEntry: its JSON keys are the
// model's field names (they are what operators write, what the REST API
// returns, what rules.json stores, and what every validation problem names),
// so there is no second spelling of a rule to keep in step. restapi decodes
// LoxiLB's JSON into this model and encodes it back; it does not interpret
// a field.
//
// The flow of one rule:
//
//	Entry ─ Validate ─▶ NormalizeEntry ─▶ Rule{Key, Entry, Effective}
//	                                          │
//	                           Compile(Rule, Defaults)
//	                                          ▼
//	                            Compiled (gateway, actors, ladder)
//
// Effective is the rule with every LoxiLB default applied, durations as
// durations; Compiled adds the daemon's defaults (environment knobs) and is
// what the data plane consumes. Both are derived, never written by hand.
package rule
