// Package catalog is llb's configuration: the records operators write,
// how a write merges with what is stored, where the records live (the state
// file rules.json on one node; etcd, with rules.json as a local cache, in a
// cluster) and how every change reaches the data plane. restapi decodes
// LoxiLB's JSON and answers HTTP; catalog decides, stores and applies.
//
// The flow of one change:
//
//	restapi: decode → rule.Validate → rule.NormalizeEntry
//	Catalog.Write(decide) → Rules.Upsert / Remove (pure: the next table and a
//	  Change value, or a conflict) → StateFile.save (atomic, durable) or a
//	  conditional commit to the shared store → publish → Runtime.Apply/Remove
//
// On one node Write commits to the state file; in a cluster it commits to
// the shared store and every replica, this one included, applies the change
// from its watch, in revision order (shared.go). Restore fills the catalog
// at start. Error texts are the REST API's answers (LoxiLB's wire
// vocabulary, and llb's own with the "restapi:" prefix clients and
// operators already see), so they keep that wording here.
//
// Kinds of records. Rules are one kind: their table (Rules, RuleRecord),
// their merge (merge.go), their section of the state file ("rules") and
// their store in a cluster (SharedConfig.Rules). Controller instructions
// are a second kind, shared in a cluster only (SharedConfig.Controller,
// shared_controller.go). A new kind (API keys, tenant limits) joins the
// same way: an immutable table with its own decide functions, a section of
// stateEnvelope, a store and a kind in the cluster, published and applied
// under the same write lock.
package catalog
