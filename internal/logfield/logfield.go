// Package logfield names the structured log fields llb writes, once, so every
// package logs the same key for the same thing and operators can query logs by
// a stable vocabulary. Field names are snake_case.
//
// Use them with zerolog: log.Info().Str(logfield.Rule, key).Msg("rule created").
package logfield

// Field names shared by every llb package.
const (
	// Component is the subsystem that wrote the line ("restapi", "llbd", ...).
	Component = "component"
	// Addr is a listen or peer address, host:port.
	Addr = "addr"
	// Rule is a load-balancer rule key as printed by restapi.RuleKey.String.
	Rule = "rule"
	// RuleID is the opaque rule id (serviceArguments.id).
	RuleID = "rule_id"
	// RuleName is serviceArguments.name.
	RuleName = "rule_name"
	// Change is what an accepted configuration change did ("created", "replaced", ...).
	Change = "change"
	// Endpoint is an endpoint address, ip:port.
	Endpoint = "endpoint"
	// Endpoints is an endpoint count.
	Endpoints = "endpoints"
	// Method is an HTTP method.
	Method = "method"
	// Path is a URL path as received.
	Path = "path"
	// Route is the route template a request matched ("/netlox/v1/config/loadbalancer").
	Route = "route"
	// Status is an HTTP status code.
	Status = "status"
	// Duration is an elapsed time.
	Duration = "duration"
	// Remote is the remote address of a client.
	Remote = "remote"
	// File is a file path.
	File = "file"
	// MovedTo is the path a file was moved aside to.
	MovedTo = "moved_to"
	// Count is a generic count of things named by the message.
	Count = "count"
	// Index is a position in a list named by the message.
	Index = "index"
	// Problems lists validation problems.
	Problems = "problems"
	// Reason is a short machine-readable reason.
	Reason = "reason"
	// Version is a software version.
	Version = "version"
	// StateDir is the daemon's state directory.
	StateDir = "state_dir"
	// Signal is an OS signal name.
	Signal = "signal"
	// Deadline is a drain or shutdown deadline.
	Deadline = "deadline"
	// Weight is an external controller's endpoint weight (0–100).
	Weight = "weight"
	// Epoch is an external controller instruction's epoch.
	Epoch = "epoch"
)
