//go:build !linux

package gateway

// Without epoll a departed client is noticed when a write to it fails.

type departureWatch struct{}

var departures departureWatch

func (departureWatch) add(*clientConn) bool { return false }

func (departureWatch) remove(*clientConn) {}
