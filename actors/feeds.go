package actors

import (
	"context"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
)

// FeedHandle is a running feed as its inventory actor sees it.
type FeedHandle interface {
	// Stats is safe from any goroutine.
	Stats() inventory.FeedStats
	// Done is closed once the feed has closed its sockets and unregistered
	// its metrics (after its ctx ended).
	Done() <-chan struct{}
}

// DrainCluster coordinates TensorRT-LLM drains across the replicas of a
// cluster: POST /kv_cache_events hands each event out once, so one replica
// drains an endpoint and relays the bodies to the others.
type DrainCluster interface {
	// Leads reports whether this replica drains the endpoint (service,
	// addr) now; it is asked again and again, so leadership can move.
	Leads(service, addr string) bool
	// Relay hands a body this replica drained to the others (it must not
	// block, and may keep body).
	Relay(service, addr string, body []byte)
	// Follow returns the bodies other replicas drain for the endpoint until
	// the returned stop is called.
	Follow(service, addr string) (bodies <-chan []byte, stop func())
}

// FeedsConfig configures EngineFeeds.
type FeedsConfig struct {
	// Log receives the feeds' transitions and trouble.
	Log zerolog.Logger
	// Metrics receives the feeds' series.
	Metrics *metrics.Set
	// MaxMsgSize bounds one ZMQ KV-event message in bytes (0 means
	// inventory.DefaultMaxMsgSize).
	MaxMsgSize int
	// Cluster, when set, makes one replica drain each TensorRT-LLM
	// endpoint; nil (a single node) drains every one here.
	Cluster DrainCluster
}

// ZMQFeeds returns the production FeedStarter of a single node (see
// EngineFeeds).
func ZMQFeeds(log zerolog.Logger, set *metrics.Set, maxMsgSize int) FeedStarter {
	return EngineFeeds(FeedsConfig{Log: log, Metrics: set, MaxMsgSize: maxMsgSize})
}

// EngineFeeds returns the production FeedStarter: for a "tcp://" feed (vLLM,
// SGLang) one inventory.Feed, a real ZMQ SUB socket with an optional replay
// DEALER; for an "http://" feed (TensorRT-LLM) one inventory.DrainFeed
// polling POST /kv_cache_events — in a cluster only on the replica that
// leads the endpoint, the others applying what it relays. Each runs on its
// own goroutine.
func EngineFeeds(cfg FeedsConfig) FeedStarter {
	return func(ctx context.Context, spec FeedSpec, sink func(inventory.Update)) FeedHandle {
		h := &runFeed{done: make(chan struct{})}
		fc := spec.Feed
		var (
			run   func(context.Context) error
			stats func() inventory.FeedStats
			stop  func()
		)
		if strings.HasPrefix(fc.Endpoint, "http://") || strings.HasPrefix(fc.Endpoint, "https://") {
			dc := inventory.DrainConfig{
				ID: spec.ID, URL: fc.Endpoint, BlockSize: spec.BlockSize,
				Sink: sink, Logger: cfg.Log, Metrics: cfg.Metrics,
			}
			if c := cfg.Cluster; c != nil {
				svc, addr := spec.ID.Service, spec.Addr
				dc.Leader = func() bool { return c.Leads(svc, addr) }
				dc.Drained = func(body []byte) { c.Relay(svc, addr, append([]byte(nil), body...)) }
				dc.Relay, stop = c.Follow(svc, addr)
			}
			f, err := inventory.NewDrainFeed(dc)
			if err != nil {
				cfg.Log.Error().Err(err).Str(logfield.Endpoint, fc.Endpoint).Msg("kv drain not started")
				if stop != nil {
					stop()
				}
				close(h.done)
				return h
			}
			run, stats = f.Run, f.Stats
		} else {
			f, err := inventory.NewFeed(inventory.FeedConfig{
				ID: spec.ID, Endpoint: fc.Endpoint, ReplayEndpoint: fc.ReplayEndpoint,
				Sink: sink, Logger: cfg.Log, Metrics: cfg.Metrics, MaxMsgSize: cfg.MaxMsgSize,
			})
			if err != nil {
				cfg.Log.Error().Err(err).Str(logfield.Endpoint, fc.Endpoint).Msg("kv feed not started")
				close(h.done)
				return h
			}
			run, stats = f.Run, f.Stats
		}
		h.stats = stats
		go func() {
			defer close(h.done)
			if stop != nil {
				defer stop()
			}
			if err := run(ctx); err != nil {
				cfg.Log.Error().Err(err).Str(logfield.Endpoint, fc.Endpoint).Msg("kv feed stopped with an error")
			}
		}()
		return h
	}
}

// runFeed is a running ZMQ feed or drain.
type runFeed struct {
	stats func() inventory.FeedStats
	done  chan struct{}
}

func (r *runFeed) Stats() inventory.FeedStats {
	if r.stats == nil {
		return inventory.FeedStats{}
	}
	return r.stats()
}

func (r *runFeed) Done() <-chan struct{} { return r.done }
