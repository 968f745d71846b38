package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/lifecycle"
	"github.com/llbproject/llb/restapi"
)

// The debug listener (--debug-listen, LLB_DEBUG_LISTEN): an opt-in HTTP
// listener, off by default and bound to loopback only, for fault-injection
// tests against the real daemon. It serves one route:
//
//	POST /debug/chaos/crash {"rule":"tcp:127.0.0.1:2020","kind":"router","idx":0}
//
// which makes one actor of a running rule panic, as a fault would, so its
// supervisor restarts it (actors.Service.Crash). kind is router, endpoint,
// breaker, inventory or session; idx is the endpoint index (endpoint,
// breaker, inventory) or the session shard (ignored for router). Answers:
// 200 {"crashed":true,...}; 400 for a bad body or kind; 404 when the rule is
// not served or has no such actor; 405 for another method.
//
// It has no authentication: loopback is its only protection, which is why
// the configuration refuses any other host.

// debugPathCrash is the crash route.
const debugPathCrash = "/debug/chaos/crash"

// debugBodyLimit bounds a debug request body.
const debugBodyLimit = 4 << 10

// serviceLookup returns a running rule's actor service by its key
// (rule.RuleKey.String, e.g. "tcp:127.0.0.1:2020"), or nil.
type serviceLookup func(rule string) *actors.Service

// lookupFor returns the service lookup of the daemon's data plane; without
// a data plane no rule has a service.
func lookupFor(rt restapi.Runtime) serviceLookup {
	if dp, ok := rt.(*lifecycle.DataPlane); ok {
		return dp.Service
	}
	return func(string) *actors.Service { return nil }
}

// actorKinds maps the route's kind names to actor kinds.
var actorKinds = map[string]actors.ActorKind{
	"router":    actors.KindRouter,
	"endpoint":  actors.KindEndpoint,
	"breaker":   actors.KindBreaker,
	"inventory": actors.KindInventory,
	"session":   actors.KindSession,
}

// crashRequest is the body of POST /debug/chaos/crash.
type crashRequest struct {
	Rule string `json:"rule"`
	Kind string `json:"kind"`
	Idx  int    `json:"idx"`
}

// debugHandler serves the debug routes over lookup.
func debugHandler(lookup serviceLookup, log zerolog.Logger) http.Handler {
	mux := http.NewServeMux()
	// Go's profiler, for measuring llbd under load (loopback only, like
	// everything on this listener).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc(debugPathCrash, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			debugReply(w, http.StatusMethodNotAllowed, map[string]any{"error": "use POST"})
			return
		}
		var req crashRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, debugBodyLimit))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			debugReply(w, http.StatusBadRequest, map[string]any{"error": "body must be {\"rule\":…,\"kind\":…,\"idx\":…}: " + err.Error()})
			return
		}
		kind, ok := actorKinds[req.Kind]
		if !ok {
			debugReply(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("kind %q: want router, endpoint, breaker, inventory or session", req.Kind)})
			return
		}
		svc := lookup(req.Rule)
		if svc == nil {
			debugReply(w, http.StatusNotFound, map[string]any{"error": fmt.Sprintf("rule %q is not served (keys look like tcp:127.0.0.1:2020)", req.Rule)})
			return
		}
		if !svc.Crash(kind, req.Idx) {
			debugReply(w, http.StatusNotFound, map[string]any{"error": fmt.Sprintf("rule %q has no %s actor %d", req.Rule, req.Kind, req.Idx)})
			return
		}
		log.Info().Str(logfield.Rule, req.Rule).Str(logfield.Actor, fmt.Sprintf("%s-%d", req.Kind, req.Idx)).Msg("chaos: actor crash injected")
		debugReply(w, http.StatusOK, map[string]any{"crashed": true, "rule": req.Rule, "kind": req.Kind, "idx": req.Idx})
	})
	return mux
}

func debugReply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do then
}

// startDebugListener binds addr (checked loopback by the configuration) and
// serves the debug routes until the returned stop is called.
func startDebugListener(addr string, lookup serviceLookup, log zerolog.Logger) (bound net.Addr, stop func(context.Context), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("debug listener: %w", err)
	}
	srv := &http.Server{Handler: debugHandler(lookup, log), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn().Err(err).Msg("debug listener stopped")
		}
	}()
	log.Warn().Str(logfield.Addr, ln.Addr().String()).
		Msg("debug listener on: POST " + debugPathCrash + " makes actors panic (fault injection); never enable it in production")
	return ln.Addr(), func(ctx context.Context) {
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

// checkLoopback accepts host:port only when host is a loopback IP address
// or "localhost": the debug listener has no authentication.
func checkLoopback(addr string) error {
	if err := checkListen(addr); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return errors.New("the debug listener has no authentication: its host must be a loopback address (127.0.0.1, ::1 or localhost)")
	}
	return nil
}
