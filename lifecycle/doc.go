// Package lifecycle turns rule changes into running services, whichever
// source they come from (the REST API, the rules file at start, the shared
// store of a cluster): it is the restapi.Runtime of the daemon.
//
// A rule goes through it in one line:
//
//	restapi (LoxiLB JSON ↔ rule.Rule, persistence)
//	  └─▶ DataPlane.Apply(rule.Rule)
//	        ├─ rule.Compile ─▶ *rule.Compiled (every default applied)
//	        │     (ErrNotServed: kept, reported offline, nothing runs)
//	        └─ ruleSet.apply(runSpec{compiled rule, actors.ServiceConfig})
//	              ├─ complete: hasher (kept across replaces with the same
//	              │   hash contract), endpoint watch, probes, /metrics scrapes,
//	              │   KV feed starter, LoRA catalog, tokenizer
//	              ├─ create:  actors.Service + gateway.Handler + Listener
//	              ├─ replace: new handler swapped onto the same listener, the
//	              │   old service's warm state handed to the new one
//	              └─ remove:  drain the listener, stop the service
//
// The gateway (the data plane) and the actors (routing state) both read the
// same *rule.Compiled; neither keeps a configuration of its own. Status and
// the inventory and controller views translate the live state back into
// restapi's shapes (dataplane.go, views.go).
package lifecycle
