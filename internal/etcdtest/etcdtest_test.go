package etcdtest

import (
	"testing"
	"time"
)

func TestStart_ThreeMembersHealthyAndRestartable(t *testing.T) {
	c := Start(t, Options{Members: 3})
	if got := len(c.Endpoints()); got != 3 {
		t.Fatalf("endpoints = %d; want 3", got)
	}
	m := c.Member(1)
	m.Kill()
	if m.Running() {
		t.Fatal("member still running after Kill")
	}
	if err := c.RestartAll(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.Healthy(); !ok {
		t.Fatalf("restarted member not healthy: %v", err)
	}
}
