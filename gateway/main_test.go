package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind (a
// handler, an upstream connection, a probe, a timer).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
