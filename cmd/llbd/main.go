// Command llbd is the llb daemon: an LLM-aware L7 load balancer with LoxiLB's
// REST API on :11111. See docs/configuration.md for its flags and environment.
//
// Exit status: 0 after a clean shutdown (SIGTERM or SIGINT), 1 when it cannot
// run (listener, state directory), 2 for a bad flag or environment variable.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=<v>".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		stop() // a second signal now takes the default action: exit at once
	}()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}
