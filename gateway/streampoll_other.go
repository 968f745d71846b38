//go:build !linux

package gateway

// Without epoll streams wait in their goroutine (the relay is the server's).

const streamPolls = false

func startStreamPoller() {}

type parkedStream struct{}

func (*parkedStream) kick() {}

func (*parkedStream) stop() {}

func (*hijackedStream) park() bool { return false }
