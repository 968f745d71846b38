package replica

import (
	"context"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// zerologHandler routes protoactor's slog lines into zerolog at Warn and
// above (the library logs routine events, even at Error, in colour on
// stderr by default).
type zerologHandler struct {
	log   zerolog.Logger
	attrs []slog.Attr
	group string
}

// loggerFactory is the actor system's logger: protoactor lines at Warn and
// above into log, tagged component=protoactor.
func loggerFactory(log zerolog.Logger) func(*actor.ActorSystem) *slog.Logger {
	return func(system *actor.ActorSystem) *slog.Logger {
		return slog.New(&zerologHandler{log: log.With().Str("component", "protoactor").Logger()})
	}
}

// Enabled implements slog.Handler.
func (h *zerologHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

// Handle implements slog.Handler.
func (h *zerologHandler) Handle(_ context.Context, r slog.Record) error {
	ev := h.log.Warn()
	if r.Level >= slog.LevelError {
		ev = h.log.Error()
	}
	add := func(a slog.Attr) bool {
		k := a.Key
		if h.group != "" {
			k = h.group + "." + k
		}
		ev = ev.Interface(k, a.Value.Any())
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	ev.Msg(r.Message)
	return nil
}

// WithAttrs implements slog.Handler.
func (h *zerologHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &n
}

// WithGroup implements slog.Handler.
func (h *zerologHandler) WithGroup(name string) slog.Handler {
	n := *h
	n.group = name
	return &n
}
