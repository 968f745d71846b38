package actors

import (
	"context"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/rule"
)

// FeedHandle is a running feed as its inventory actor sees it.
type FeedHandle interface {
	// Stats is safe from any goroutine.
	Stats() inventory.FeedStats
	// Done is closed once the feed has closed its sockets and unregistered
	// its metrics (after its ctx ended).
	Done() <-chan struct{}
}

// ZMQFeeds returns the production FeedStarter: one inventory.Feed (a real
// ZMQ SUB socket, optional replay DEALER) per subscription, on its own
// goroutine. maxMsgSize bounds one KV-event message in bytes (0 means
// inventory.DefaultMaxMsgSize).
func ZMQFeeds(log zerolog.Logger, set *metrics.Set, maxMsgSize int) FeedStarter {
	return func(ctx context.Context, id inventory.EndpointID, fc rule.Feed, sink func(inventory.Update)) FeedHandle {
		h := &zmqFeed{done: make(chan struct{})}
		f, err := inventory.NewFeed(inventory.FeedConfig{
			ID: id, Endpoint: fc.Endpoint, ReplayEndpoint: fc.ReplayEndpoint,
			Sink: sink, Logger: log, Metrics: set, MaxMsgSize: maxMsgSize,
		})
		if err != nil {
			log.Error().Err(err).Str(logfield.Endpoint, fc.Endpoint).Msg("kv feed not started")
			close(h.done)
			return h
		}
		h.f = f
		go func() {
			defer close(h.done)
			if err := f.Run(ctx); err != nil {
				log.Error().Err(err).Str(logfield.Endpoint, fc.Endpoint).Msg("kv feed stopped with an error")
			}
		}()
		return h
	}
}

type zmqFeed struct {
	f    *inventory.Feed
	done chan struct{}
}

func (z *zmqFeed) Stats() inventory.FeedStats {
	if z.f == nil {
		return inventory.FeedStats{}
	}
	return z.f.Stats()
}

func (z *zmqFeed) Done() <-chan struct{} { return z.done }
