// Package command is what llb's commands (llbd, llbctl, llbsim) share in
// their main: the version they report and how a signal ends them.
package command

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// Version is stamp, a command's build-time version (its main.version, set
// with -ldflags "-X main.version=<v>"; "dev" otherwise), followed by
// "+<12 hex digits>" of the VCS revision when the build recorded one.
func Version(stamp string) string {
	v := stamp
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
	}
	return v
}

// Main runs fn with a context that the first SIGTERM or SIGINT cancels (a
// second one takes the default action: the process exits at once), then
// exits the process with the status fn returns.
func Main(fn func(ctx context.Context) int) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		stop() // a second signal now takes the default action: exit at once
	}()
	code := fn(ctx)
	stop()
	os.Exit(code)
}
