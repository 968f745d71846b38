// Package testwait holds the polling wait the test packages share.
package testwait

import (
	"testing"
	"time"
)

// Eventually fails t unless cond holds within 5 s, polling every 5 ms.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
