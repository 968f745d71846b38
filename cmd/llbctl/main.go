// Command llbctl is llb's command-line client: a loxicmd-style CLI over
// llbd's LoxiLB-compatible REST API (docs/rest-api.md). It creates, lists and
// deletes load-balancer rules with the same options as the JSON, shows
// endpoint health and KV inventories, and sets controller weights.
//
// Exit status: 0 on success; 1 when llbd answered with an error (its message
// is printed); 2 for a bad command line or when llbd could not be reached.
//
// See docs/llbctl.md.
package main

import (
	"context"
	"os"

	"github.com/llbproject/llb/internal/command"
)

// version is set at build time with -ldflags "-X main.version=<v>".
var version = "dev"

func main() {
	command.Main(func(ctx context.Context) int {
		return run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	})
}

// buildVersion is llbctl's version with the VCS revision when known.
func buildVersion() string { return command.Version(version) }
