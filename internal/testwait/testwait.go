// Package testwait holds the polling wait the test packages share.
package testwait

import (
	"testing"
	"time"
)

// Eventually fails t unless cond holds within 15 s, polling every 5 ms
// (generous: a loaded 2-core CI machine can stall a goroutine for seconds,
// and a condition that holds returns at once).
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 15s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
