package worker

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// ServeProcess runs one worker as the whole of a process (the test and
// attack harnesses start workers as processes they can SIGKILL and
// SIGSTOP): it starts c, prints "ready <addr>" on stdout once serving, and
// returns the process's exit code — 0 after a graceful stop on SIGTERM or
// SIGINT (5 s bound), 1 when the worker cannot start (the error on stderr,
// prefixed by who) or ends on its own.
func ServeProcess(c Config, who string) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	w, err := Start(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, who+":", err)
		return 1
	}
	fmt.Println("ready", w.Addr())
	select {
	case <-sig:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
		return 0
	case <-w.Done():
		return 1
	}
}
