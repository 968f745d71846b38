package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/llbproject/llb/simulate/engine"
)

// SGLang's P/D as the simulator plays it. The router sends the same body,
// with bootstrap_host (the prefill's address), bootstrap_port (the prefill's
// --disaggregation-bootstrap-port) and a fresh bootstrap_room, to the prefill
// and the decode worker at once. The decode joins the room on the prefill's
// bootstrap server; the prefill starts only once its decode joined (a
// router that waits for the prefill before calling the decode hangs until
// BootstrapTimeout), computes the prompt's KV, holds it for the decode and
// answers; the decode reads it (the side-channel pull the NIXL path uses)
// and generates. A decode whose room fails or times out answers 500 before
// any byte.

// Bootstrap routes on a prefill worker's bootstrap port.
const (
	bootstrapJoinPath = "/bootstrap/join"
	bootstrapWaitPath = "/bootstrap/wait"
)

// maxRoom bounds bootstrap_room (SGLang's rooms are non-negative int64).
const maxRoom = 1<<63 - 1

// bootstrapTriple is what the router injects.
type bootstrapTriple struct {
	Host string
	Port int
	Room uint64
}

// roomState is one room on a prefill worker.
type roomState struct {
	joined chan struct{} // closed when the decode joined
	done   chan struct{} // closed when the prefill's KV is ready or failed
	once   sync.Once
	params *engine.RemoteParams // nil: failed
	born   time.Time
}

// rooms is a prefill worker's room registry.
type rooms struct {
	mu sync.Mutex
	m  map[uint64]*roomState
}

// get returns room id, creating it (joins and prefills race).
func (rs *rooms) get(id uint64) *roomState {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[uint64]*roomState{}
	}
	r := rs.m[id]
	if r == nil {
		r = &roomState{joined: make(chan struct{}), done: make(chan struct{}), born: time.Now()}
		rs.m[id] = r
	}
	return r
}

// finish publishes the prefill's outcome (nil: failed) once.
func (r *roomState) finish(p *engine.RemoteParams) {
	r.once.Do(func() {
		r.params = p
		close(r.done)
	})
}

// drop forgets a room.
func (rs *rooms) drop(id uint64) {
	rs.mu.Lock()
	delete(rs.m, id)
	rs.mu.Unlock()
}

// sweep forgets rooms older than ttl (a pair whose other side never came).
func (rs *rooms) sweep(ttl time.Duration) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for id, r := range rs.m {
		if time.Since(r.born) > ttl {
			r.finish(nil)
			delete(rs.m, id)
		}
	}
}

// parseBootstrap reads the triple; all three or none.
func parseBootstrap(host *string, port *int, room *json.Number) (*bootstrapTriple, *reqError) {
	if host == nil && port == nil && room == nil {
		return nil, nil
	}
	if host == nil || port == nil || room == nil {
		return nil, badRequest("bootstrap_host, bootstrap_port and bootstrap_room go together")
	}
	id, err := strconv.ParseUint(room.String(), 10, 64)
	if err != nil || id > maxRoom {
		return nil, badRequest("bootstrap_room %s: want an integer in 0..2^63-1", room)
	}
	if *port <= 0 || *port > 65535 {
		return nil, badRequest("bootstrap_port %d out of range", *port)
	}
	return &bootstrapTriple{Host: *host, Port: *port, Room: id}, nil
}

// joinRequest is a decode's join.
type joinRequest struct {
	Room uint64 `json:"bootstrap_room"`
}

// waitReply tells a decode where to read its room's KV.
type waitReply struct {
	Status    string `json:"status"` // "ready" or "failed"
	EngineID  string `json:"engine_id,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	BlockIDs  []int  `json:"block_ids,omitempty"`
	Host      string `json:"host,omitempty"`
	Port      int    `json:"port,omitempty"`
}

// bootstrapMux serves a prefill worker's bootstrap port.
func (w *Worker) bootstrapMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+bootstrapJoinPath, func(rw http.ResponseWriter, r *http.Request) {
		var jr joinRequest
		body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, 4096))
		if err == nil {
			err = json.Unmarshal(body, &jr)
		}
		if err != nil || jr.Room > maxRoom {
			writeError(rw, http.StatusBadRequest, "join: want {\"bootstrap_room\": <room>}")
			return
		}
		room := w.rooms.get(jr.Room)
		select {
		case <-room.joined:
		default:
			close(room.joined)
		}
		writeJSON(rw, http.StatusOK, map[string]string{"status": "joined"})
	})
	mux.HandleFunc("GET "+bootstrapWaitPath, func(rw http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.URL.Query().Get("room"), 10, 64)
		if err != nil || id > maxRoom {
			writeError(rw, http.StatusBadRequest, "wait: want ?room=<room>")
			return
		}
		room := w.rooms.get(id)
		select {
		case <-room.done:
		case <-r.Context().Done():
			return
		case <-w.stopping:
			writeJSON(rw, http.StatusOK, waitReply{Status: "failed"})
			return
		}
		w.rooms.drop(id)
		if room.params == nil {
			writeJSON(rw, http.StatusOK, waitReply{Status: "failed"})
			return
		}
		writeJSON(rw, http.StatusOK, waitReply{Status: "ready", EngineID: room.params.EngineID, RequestID: room.params.RequestID,
			BlockIDs: room.params.BlockIDs, Host: w.cfg.IP, Port: w.nixlPort()})
	})
	return mux
}

// awaitJoin parks a prefill leg until its decode joined the room; false when
// the client left, the worker stopped or BootstrapTimeout passed.
func (w *Worker) awaitJoin(ctx context.Context, t *bootstrapTriple) (*roomState, error) {
	room := w.rooms.get(t.Room)
	timer := time.NewTimer(w.cfg.BootstrapTimeout)
	defer timer.Stop()
	select {
	case <-room.joined:
		return room, nil
	case <-timer.C:
		room.finish(nil)
		return nil, fmt.Errorf("bootstrap room %d: no decode joined within %v", t.Room, w.cfg.BootstrapTimeout)
	case <-ctx.Done():
		room.finish(nil)
		return nil, ctx.Err()
	case <-w.stopping:
		room.finish(nil)
		return nil, ErrStopped
	}
}

// joinAndWait is a decode leg's side: join the room on the prefill's
// bootstrap server, wait for the prefill's KV, and return the pull to make.
func (w *Worker) joinAndWait(ctx context.Context, t *bootstrapTriple) (*kvParams, error) {
	base := "http://" + net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
	ctx, cancel := context.WithTimeout(ctx, w.cfg.BootstrapTimeout)
	defer cancel()
	body, _ := json.Marshal(joinRequest{Room: t.Room})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+bootstrapJoinPath, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	resp, err := w.bootClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("join %s: %w", base, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("join %s: status %d", base, resp.StatusCode)
	}
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, base+bootstrapWaitPath+"?room="+strconv.FormatUint(t.Room, 10), nil)
	if err != nil {
		return nil, fmt.Errorf("wait: %w", err)
	}
	resp, err = w.bootClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("wait %s: %w", base, err)
	}
	defer resp.Body.Close()
	var wr waitReply
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&wr); err != nil {
		return nil, fmt.Errorf("wait %s: %w", base, err)
	}
	if wr.Status != "ready" {
		return nil, errors.New("the prefill side failed the room")
	}
	ids, _ := json.Marshal(wr.BlockIDs)
	return &kvParams{DoRemotePrefill: true, RemoteEngineID: &wr.EngineID, RemoteRequestID: &wr.RequestID,
		RemoteBlockIDs: ids, RemoteHost: &wr.Host, RemotePort: &wr.Port}, nil
}
