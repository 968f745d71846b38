package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind (a
// handler, an upstream connection, a probe, a timer). net/http lingers
// 500 ms on a connection it closes after a response (closeWriteAndWait,
// its RST-avoidance delay) and then ends on its own; so does protoactor's
// dead-letter throttle, which waits out its period after a system stops.
// Those two are ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
