package replica

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/llbproject/llb/internal/logfield"
)

// ErrNotMember: this replica is not in the cluster right now (joining,
// rejoining after a lost lease, or stopped). Callers treat it as a miss.
var ErrNotMember = errors.New("replica: not a cluster member right now")

// State is a Member's membership state.
type State string

// Member states.
const (
	StateJoining   State = "joining"   // first join in progress
	StateMember    State = "member"    // joined; peers see this replica
	StateRejoining State = "rejoining" // membership broke; joining again with a fresh id
	StateStopped   State = "stopped"
)

// Member is this replica's cluster membership, healing itself: it runs one
// incarnation (actor system + cluster member) at a time and replaces it
// with a fresh one, under a fresh member id, whenever the membership
// breaks. Safe for concurrent use; the hot-path readers (Sessions, Load)
// take no locks.
type Member struct {
	cfg Config
	log zerolog.Logger
	cli *clientv3.Client

	// Sessions, Load and Teacher outlive incarnations.
	Sessions *Sessions
	Load     *Load
	Teacher  *Teacher

	inc atomic.Pointer[incarnation] // nil while joining/rejoining/stopped

	mu sync.Mutex
	// Guarded by mu.
	state        State
	since        time.Time
	incarnations int64
	rejoins      int64
	lastReason   string
	etcdErr      error
	etcdSince    time.Time

	stop chan struct{}
	done chan struct{}
}

// Start validates cfg, connects to etcd (without waiting for it) and starts
// joining in the background; it returns at once. Use WaitMember to wait for
// the first join. Stop leaves the cluster.
func Start(cfg Config) (*Member, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cli, err := cfg.Etcd.New()
	if err != nil {
		return nil, err
	}
	m := &Member{
		cfg:   cfg,
		log:   cfg.Log.With().Str(logfield.Component, "replica").Str(logfield.Cluster, cfg.ClusterName).Str(logfield.Addr, cfg.Advertise).Logger(),
		cli:   cli,
		state: StateJoining,
		since: time.Now(),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	m.Sessions = newSessions(m)
	m.Load = newLoad(m)
	m.Teacher = newTeacher(m)
	go m.run()
	go m.Load.publishLoop(m.stop)
	go m.Teacher.flushLoop(m.stop)
	return m, nil
}

// Stop leaves the cluster (peers see it at once: the lease is revoked) and
// releases everything. It waits for the current incarnation to end.
func (m *Member) Stop() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
	_ = m.cli.Close()
}

// WaitMember waits until the replica is a member, or timeout passes.
func (m *Member) WaitMember(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for m.inc.Load() == nil {
		if time.Now().After(deadline) {
			st := m.Status()
			return fmt.Errorf("replica: not a member after %v (state %s, etcd: %s)", timeout, st.State, st.Etcd.Error)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// current returns the live incarnation or nil.
func (m *Member) current() *incarnation { return m.inc.Load() }

// ID returns the current member id ("" when not a member).
func (m *Member) ID() string {
	if inc := m.current(); inc != nil {
		return inc.id
	}
	return ""
}

func (m *Member) setState(s State, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != s {
		m.state, m.since = s, time.Now()
	}
	if reason != "" {
		m.lastReason = reason
	}
}

func (m *Member) setEtcd(err error) {
	m.mu.Lock()
	changed := (err == nil) != (m.etcdErr == nil)
	m.etcdErr = err
	if changed {
		m.etcdSince = time.Now()
	}
	m.mu.Unlock()
	if !changed {
		return
	}
	if err != nil {
		m.log.Warn().Err(err).Msg("etcd trouble: membership cannot be renewed or watched; routing goes on with the last view")
	} else {
		m.log.Info().Msg("etcd reachable again")
	}
}

// run is the supervisor: one incarnation at a time, a fresh one whenever
// the current one breaks, until Stop.
func (m *Member) run() {
	defer close(m.done)
	backoff := m.cfg.RejoinBackoff
	for {
		select {
		case <-m.stop:
			m.setState(StateStopped, "")
			return
		default:
		}
		m.mu.Lock()
		m.incarnations++
		n := m.incarnations
		m.mu.Unlock()
		start := time.Now()
		inc, err := startIncarnation(m, n)
		if err != nil {
			m.setEtcd(err)
			m.log.Warn().Err(err).Int64(logfield.Incarnation, n).Dur("retry_in", backoff).Msg("cluster join failed; retrying")
			select {
			case <-m.stop:
				m.setState(StateStopped, "")
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxRejoinBackoff)
			continue
		}
		backoff = m.cfg.RejoinBackoff
		m.inc.Store(inc)
		m.setState(StateMember, "")
		m.Sessions.prefetchAll()
		m.log.Info().Str(logfield.Member, inc.id).Int64(logfield.Incarnation, n).Dur(logfield.Duration, time.Since(start)).
			Int(logfield.Members, len(inc.memberList())).Msg("joined the cluster")
		var reason string
		select {
		case <-m.stop:
			m.inc.Store(nil)
			inc.teardown()
			m.setState(StateStopped, "")
			m.log.Info().Str(logfield.Member, inc.id).Msg("left the cluster")
			return
		case reason = <-inc.failed:
		}
		m.inc.Store(nil)
		m.mu.Lock()
		m.rejoins++
		m.mu.Unlock()
		m.setState(StateRejoining, reason)
		m.log.Warn().Str(logfield.Member, inc.id).Int64(logfield.Incarnation, n).Str(logfield.Reason, reason).
			Msg("membership broke; rejoining with a fresh member id (session shards owned here restart empty)")
		inc.teardown()
	}
}
