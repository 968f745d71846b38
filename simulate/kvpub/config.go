// Package kvpub publishes a simulated engine's KV events the way vLLM's
// ZmqEventPublisher does (vllm/distributed/kv_events.py): a ZMQ PUB socket
// sending [topic, seq (8 bytes big-endian, from 0), msgpack EventBatch]
// multipart messages, one per engine step, and an optional ROUTER replay
// socket that answers ["", start_seq8] with every buffered batch from that
// sequence on, then an end marker (the newer reply generation).
//
// Encoding is inventory.AppendBatch, the same codec llb decodes with. One
// goroutine owns both sockets, creates, uses and closes them; callers only
// talk to it through a bounded queue.
package kvpub

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/inventory"
)

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("kvpub: invalid configuration")
	// ErrBind reports a socket that could not bind or connect.
	ErrBind = errors.New("kvpub: bind failed")
	// ErrQueueFull reports a batch dropped because the publisher's queue is
	// full (vLLM drops too, with a warning); it is counted in Stats.Dropped.
	ErrQueueFull = errors.New("kvpub: queue full, batch dropped")
	// ErrClosed reports a Publish after Close or Kill.
	ErrClosed = errors.New("kvpub: publisher closed")
	// ErrEncode reports events the codec refused.
	ErrEncode = errors.New("kvpub: cannot encode batch")
)

// Config configures a Publisher. Zero values take the documented defaults.
type Config struct {
	// Endpoint is the PUB address, e.g. "tcp://127.0.0.2:5557". It is bound
	// (each simulated worker binds its own loopback IP, because an llb rule
	// has one kvZmqPort for every endpoint) unless Connect is set. Port "*"
	// binds an ephemeral port; Endpoint() reports the one chosen. Required.
	Endpoint string
	// Connect makes the PUB socket connect instead of bind (llm-d's pattern
	// of every pod dialling one router that binds).
	Connect bool
	// ReplayEndpoint is the ROUTER replay address, always bound; "" disables
	// replay.
	ReplayEndpoint string
	// Topic is sent verbatim as frame 0 (vLLM's default is "").
	Topic string
	// Layout is the event encoding: map (current vLLM, the default), the
	// legacy array layout, or SGLang's.
	Layout inventory.Layout
	// DigestHashes sends raw digest bytes instead of uint64 keys
	// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
	DigestHashes bool
	// DPRank is the data-parallel rank written in every batch. Default 0.
	DPRank int
	// BufferSteps is how many past batches the replay socket keeps.
	// Default 10000 (vLLM's buffer_steps).
	BufferSteps int
	// HWM is the PUB send high-water mark in messages. Default 100000.
	HWM int
	// QueueSize bounds batches waiting for the socket goroutine. Default
	// 10000.
	QueueSize int
	// ReplayPoll is how often the socket goroutine checks the replay socket.
	// Default 5ms.
	ReplayPoll time.Duration
	// BindRetry is how long a bind keeps retrying an address still in use
	// (a restarted worker rebinding its old port). Default 2s.
	BindRetry time.Duration
	// Linger is how long Close lets queued messages drain to subscribers.
	// Default 200ms. Kill always uses 0.
	Linger time.Duration
	// Logger receives transitions (bind, close) and per-event problems at
	// Debug. Default: disabled.
	Logger *zerolog.Logger
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.BufferSteps == 0 {
		c.BufferSteps = 10000
	}
	if c.HWM == 0 {
		c.HWM = 100000
	}
	if c.QueueSize == 0 {
		c.QueueSize = 10000
	}
	if c.ReplayPoll == 0 {
		c.ReplayPoll = 5 * time.Millisecond
	}
	if c.BindRetry == 0 {
		c.BindRetry = 2 * time.Second
	}
	if c.Linger == 0 {
		c.Linger = 200 * time.Millisecond
	}
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
	return c
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if !strings.Contains(c.Endpoint, "://") {
		errs = append(errs, fmt.Errorf("endpoint %q (want transport://address, e.g. tcp://127.0.0.2:5557)", c.Endpoint))
	}
	if c.ReplayEndpoint != "" && !strings.Contains(c.ReplayEndpoint, "://") {
		errs = append(errs, fmt.Errorf("replay endpoint %q (want transport://address)", c.ReplayEndpoint))
	}
	if c.Layout != inventory.LayoutMap && c.Layout != inventory.LayoutArray && c.Layout != inventory.LayoutSGLang {
		errs = append(errs, fmt.Errorf("layout %d unknown", c.Layout))
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"dp rank", c.DPRank}, {"buffer steps", c.BufferSteps}, {"hwm", c.HWM}, {"queue size", c.QueueSize}} {
		if v.n < 0 {
			errs = append(errs, fmt.Errorf("%s %d (want >= 0)", v.name, v.n))
		}
	}
	for _, v := range []struct {
		name string
		d    time.Duration
	}{{"replay poll", c.ReplayPoll}, {"bind retry", c.BindRetry}, {"linger", c.Linger}} {
		if v.d < 0 {
			errs = append(errs, fmt.Errorf("%s %v (want >= 0)", v.name, v.d))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("kvpub config: %w: %w", ErrConfig, errors.Join(errs...))
}
