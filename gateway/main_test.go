package gateway

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind (a
// handler, an upstream connection, a probe, a timer). Three end on their
// own and are ignored: net/http lingers 500 ms on a connection it closes
// after a response (closeWriteAndWait, its RST-avoidance delay; the test
// backends and the h2c front end are net/http), protoactor's dead-letter
// throttle waits out its period after a system stops, and fasthttp keeps
// one process-wide goroutine that refreshes its Date header every second
// and, once a fasthttp client dialed (the benchmarks' clients), its
// default dialer's DNS-cache cleaner, which ends a minute after the last
// dial.
// The departure watcher (departures_linux.go) is one goroutine for the
// process's life by design, and so is the stream poller's
// (streampoll_linux.go).
//
// LLB_STREAM_POLLER=1 runs the package with the stream poller on (make test
// runs the stream tests so too): every stream test then goes through it.
func TestMain(m *testing.M) {
	if os.Getenv("LLB_STREAM_POLLER") == "1" {
		SetStreamPoller(true)
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/llbproject/llb/gateway.(*departureWatch).run"),
		goleak.IgnoreAnyFunction("github.com/llbproject/llb/gateway.(*pollShard).run"))
}
