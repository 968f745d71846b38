package inventory

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind (feeds,
// test routers, HTTP servers, pollers).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
