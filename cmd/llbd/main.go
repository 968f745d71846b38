// Command llbd is the llb daemon: an LLM-aware L7 load balancer with LoxiLB's
// REST API on :11111. See docs/configuration.md for its flags and environment.
//
// Exit status: 0 after a clean shutdown (SIGTERM or SIGINT), 1 when it cannot
// run (listener, state directory), 2 for a bad flag or environment variable.
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
		return exitCode(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr), os.Stderr)
	})
}

// buildVersion is llbd's version with the VCS revision when known.
func buildVersion() string { return command.Version(version) }
