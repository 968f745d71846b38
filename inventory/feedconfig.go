package inventory

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
)

// FeedEndpoint builds the ZMQ address of a rank's publisher:
// tcp://<ip>:<kvZmqPort+rank> (IPv6 addresses are bracketed).
func FeedEndpoint(ip string, kvZmqPort, rank int) string {
	return "tcp://" + net.JoinHostPort(ip, strconv.Itoa(kvZmqPort+rank))
}

// EnvMaxMsgSize is the environment variable bounding one KV-event message.
const EnvMaxMsgSize = "LLB_KV_MAX_MSG_BYTES"

// MaxMsgSizeFromEnv reads LLB_KV_MAX_MSG_BYTES through getenv: unset or
// empty → 0 (DefaultMaxMsgSize); otherwise whole bytes in 64 KiB–1 GiB, or
// an error wrapping ErrConfig naming the variable.
func MaxMsgSizeFromEnv(getenv func(string) string) (int, error) {
	v := getenv(EnvMaxMsgSize)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 64<<10 || n > 1<<30 {
		return 0, fmt.Errorf("%s=%q: want whole bytes from 65536 to 1073741824: %w", EnvMaxMsgSize, v, ErrConfig)
	}
	return n, nil
}

// FeedConfig configures a Feed. Durations of 0 take the defaults above.
type FeedConfig struct {
	// ID names the endpoint and rank (labels, log fields, Update.ID).
	ID EndpointID
	// Endpoint is the publisher's address, e.g. FeedEndpoint(ip, 5557, 0).
	// Required.
	Endpoint string
	// ReplayEndpoint is the publisher's ROUTER replay address; "" disables
	// replay, and gaps then keep or clear the mirror by GapWindow.
	ReplayEndpoint string
	// Topic is the subscription prefix; "" receives every topic.
	Topic string
	// Sink receives every Update, in stream order, on the feed goroutine.
	// It must not block for long (the SUB socket buffers up to RcvHWM
	// messages meanwhile; beyond that ZMQ drops and the feed sees gaps).
	// Required.
	Sink func(Update)
	// GapWindow is the largest gap that keeps the mirror (default 64).
	GapWindow uint64
	// PollInterval bounds the latency of noticing ctx cancellation.
	PollInterval time.Duration
	// ReconnectIvl and ReconnectIvlMax set ZMQ's reconnect backoff.
	ReconnectIvl, ReconnectIvlMax time.Duration
	// ReplayTimeout bounds one replay (request to end marker).
	ReplayTimeout time.Duration
	// Heartbeat is the ZMTP heartbeat interval; a connection silent for
	// three of them is dropped (DefaultHeartbeat when 0).
	Heartbeat time.Duration
	// RcvHWM is the SUB receive high-water mark, in messages.
	RcvHWM int
	// MaxMsgSize is the largest message accepted, in bytes
	// (ZMQ_MAXMSGSIZE on the SUB and replay DEALER sockets); 0 means
	// DefaultMaxMsgSize. A larger message makes libzmq drop the connection.
	MaxMsgSize int
	// LogEvery rate-limits malformed-input log lines.
	LogEvery time.Duration
	// Logger receives transitions (Info) and malformed input (Warn,
	// rate-limited).
	Logger zerolog.Logger
	// Metrics receives the feed's series; nil keeps them private.
	Metrics *metrics.Set
}

// Validate reports every configuration problem at once.
func (c FeedConfig) Validate() error {
	var errs []error
	if c.Endpoint == "" {
		errs = append(errs, errors.New("Endpoint is required"))
	}
	if c.Sink == nil {
		errs = append(errs, errors.New("Sink is required"))
	}
	for name, d := range map[string]time.Duration{"PollInterval": c.PollInterval, "ReconnectIvl": c.ReconnectIvl,
		"ReconnectIvlMax": c.ReconnectIvlMax, "ReplayTimeout": c.ReplayTimeout, "LogEvery": c.LogEvery, "Heartbeat": c.Heartbeat} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %v (want >= 0)", name, d))
		}
	}
	if c.RcvHWM < 0 {
		errs = append(errs, fmt.Errorf("RcvHWM %d (want >= 0)", c.RcvHWM))
	}
	if c.MaxMsgSize < 0 {
		errs = append(errs, fmt.Errorf("MaxMsgSize %d (want >= 0)", c.MaxMsgSize))
	}
	if len(errs) > 0 {
		return fmt.Errorf("feed config: %w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

func (c *FeedConfig) defaults() {
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ReconnectIvl == 0 {
		c.ReconnectIvl = DefaultReconnectIvl
	}
	if c.ReconnectIvlMax == 0 {
		c.ReconnectIvlMax = DefaultReconnectIvlMax
	}
	if c.ReplayTimeout == 0 {
		c.ReplayTimeout = DefaultReplayTimeout
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.RcvHWM == 0 {
		c.RcvHWM = DefaultRcvHWM
	}
	if c.MaxMsgSize == 0 {
		c.MaxMsgSize = DefaultMaxMsgSize
	}
	if c.LogEvery == 0 {
		c.LogEvery = DefaultLogEvery
	}
}

// FeedStats is a snapshot of a feed's counters; safe to take from any
// goroutine.
type FeedStats struct {
	// Connected is true while the SUB socket has a live connection.
	Connected bool
	// Reconnects counts connections after the first; Disconnects counts
	// lost connections (including those libzmq drops for an oversized
	// message).
	Reconnects, Disconnects uint64
	// RecvErrors counts socket errors and malformed frames or payloads.
	RecvErrors uint64
	// Batches and Events count decoded batches and their events.
	Batches, Events uint64
	// InvalidEvents and UnknownEvents count dropped and skipped events.
	InvalidEvents, UnknownEvents uint64
	// LastSeq is the last sequence number accepted (HaveSeq false before
	// the first batch).
	LastSeq uint64
	HaveSeq bool
	// Duplicates counts batches dropped for a repeated sequence number.
	Duplicates uint64
	// Gaps counts sequence gaps; LostBatches the batches they skipped,
	// each gap counted as at most what the publisher could have sent since
	// the batch before it (see MaxPublishRate).
	Gaps, LostBatches uint64
	// Resyncs counts mirror clears ordered (gap, restart, failed replay).
	Resyncs uint64
	// Restarts counts publisher restarts (sequence went backwards).
	Restarts uint64
	// Replays and ReplayFailures count gap fills attempted by replay.
	Replays, ReplayFailures uint64
	// EventsPerSec is the event rate over the last second or so.
	EventsPerSec float64
	// Ignored tallies the events the feed dropped (invalid, unknown tag),
	// with the latest cause of each.
	Ignored IgnoreTally
}
