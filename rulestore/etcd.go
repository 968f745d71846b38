package rulestore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llbproject/llb/internal/logfield"
)

// Namespaces of llb's records in etcd.
const (
	// NamespaceRules holds load-balancer rules.
	NamespaceRules = "rules"
	// NamespaceController holds external controller instructions.
	NamespaceController = "controller"
	// NamespaceTenants holds API keys and tenant limits.
	NamespaceTenants = "tenants"
)

// Defaults of EtcdOptions.
const (
	// DefaultTimeout bounds one call that has no earlier deadline. It
	// covers an etcd leader election (about 1–2 s with etcd's default
	// 1 s election timeout).
	DefaultTimeout = 3 * time.Second
	// attemptTimeout bounds one try inside a call. A request that reached
	// a member while the leader died waits for etcd's own request timeout
	// (5 s and more); a fresh try after the election succeeds at once.
	attemptTimeout = 800 * time.Millisecond
	// watchRetryMin and watchRetryMax bound the pause between attempts to
	// re-establish a broken watch.
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 2 * time.Second
)

// KeyPrefix is where namespace ns of cluster lives in etcd:
// /llb/<ns>/<cluster>/ (cluster members are under /llb/members/<cluster>/,
// written by the replica package). Record keys are path-escaped below it,
// so a rule key with slashes stays one segment.
func KeyPrefix(cluster, ns string) string { return "/llb/" + ns + "/" + cluster + "/" }

var clusterNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidClusterName reports whether name can name a cluster: 1–63 of
// [A-Za-z0-9._-], starting with a letter or digit.
func ValidClusterName(name string) error {
	if !clusterNameRE.MatchString(name) {
		return fmt.Errorf("rulestore: cluster name %q: want 1-63 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit", name)
	}
	return nil
}

// EtcdOptions configure an Etcd store.
type EtcdOptions struct {
	// Cluster is the cluster name (--cluster-name); required.
	Cluster string
	// Namespace is NamespaceRules or NamespaceController; required.
	Namespace string
	// Timeout bounds each call whose context has no earlier deadline;
	// 0 means DefaultTimeout. A call that runs out of it returns
	// ErrUnavailable.
	Timeout time.Duration
	// Endpoints names the etcd endpoints in error messages.
	Endpoints []string
	// Log receives watch transitions (lost, resumed, resynced).
	Log zerolog.Logger
}

// Etcd is a Store in an etcd v3 server (3.4 or newer). Records of one
// namespace live under KeyPrefix(cluster, namespace).
type Etcd struct {
	cli     *clientv3.Client
	prefix  string
	timeout time.Duration
	where   string
	log     zerolog.Logger

	mu sync.Mutex
	// Guarded by mu: the last failure seen by any call, and since when
	// the store has been failing (zero when the last call succeeded).
	lastErr   error
	failSince time.Time
}

var _ Store = (*Etcd)(nil)

// NewEtcd returns a store on cli; it does not contact etcd (a store opened
// while etcd is down works once etcd is back). cli stays the caller's.
func NewEtcd(cli *clientv3.Client, opt EtcdOptions) (*Etcd, error) {
	if cli == nil {
		return nil, errors.New("rulestore: nil etcd client")
	}
	if err := ValidClusterName(opt.Cluster); err != nil {
		return nil, err
	}
	if opt.Namespace != NamespaceRules && opt.Namespace != NamespaceController && opt.Namespace != NamespaceTenants {
		return nil, fmt.Errorf("rulestore: unknown namespace %q", opt.Namespace)
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	where := strings.Join(opt.Endpoints, ",")
	if where == "" {
		where = strings.Join(cli.Endpoints(), ",")
	}
	return &Etcd{
		cli:     cli,
		prefix:  KeyPrefix(opt.Cluster, opt.Namespace),
		timeout: opt.Timeout,
		where:   where,
		log:     opt.Log.With().Str(logfield.Component, "rulestore").Str(logfield.Key, opt.Namespace).Logger(),
	}, nil
}

// Prefix returns the etcd key prefix of this store's records.
func (s *Etcd) Prefix() string { return s.prefix }

func (s *Etcd) etcdKey(key string) string { return s.prefix + url.PathEscape(key) }

func (s *Etcd) recordKey(etcdKey []byte) (string, error) {
	k, err := url.PathUnescape(strings.TrimPrefix(string(etcdKey), s.prefix))
	if err != nil {
		return "", fmt.Errorf("rulestore: foreign key %q under %s: %w", etcdKey, s.prefix, err)
	}
	return k, nil
}

// retry runs f in tries of at most attemptTimeout until it succeeds, the
// call's timeout runs out, or the error is not worth retrying. Failures
// come back as ErrUnavailable (ErrInvalid for a request etcd refuses as
// too large or malformed).
func (s *Etcd) retry(ctx context.Context, op string, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var err error
	for {
		actx, acancel := context.WithTimeout(cctx, attemptTimeout)
		err = f(actx)
		acancel()
		if err == nil {
			s.ok()
			return nil
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.ResourceExhausted:
			return fmt.Errorf("%w: etcd refused %s: %v", ErrInvalid, op, err)
		case codes.PermissionDenied, codes.Unauthenticated:
			return s.unavailable(ctx, op, err)
		}
		if cctx.Err() != nil || !sleepCtx(cctx, 50*time.Millisecond) {
			return s.unavailable(ctx, op, err)
		}
	}
}

// confirm reports whether the store holds exactly what ops write, and the
// revision of the newest written key.
func (s *Etcd) confirm(ctx context.Context, ops []Op) (int64, bool) {
	var rev int64
	for _, op := range ops {
		var resp *clientv3.GetResponse
		if err := s.retry(ctx, "a read", func(actx context.Context) (err error) {
			resp, err = s.cli.Get(actx, s.etcdKey(op.Key))
			return err
		}); err != nil {
			return 0, false
		}
		switch {
		case op.Delete && len(resp.Kvs) != 0:
			return 0, false
		case !op.Delete && (len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != string(op.Value)):
			return 0, false
		case !op.Delete:
			rev = max(rev, resp.Kvs[0].ModRevision)
		default:
			rev = max(rev, resp.Header.Revision)
		}
	}
	return rev, true
}

// unavailable wraps an etcd failure as ErrUnavailable, unless the caller
// itself gave up (its context canceled), and records it for Health.
func (s *Etcd) unavailable(ctx context.Context, op string, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("rulestore: %s: %w", op, ctx.Err())
	}
	werr := fmt.Errorf("%w: etcd at %s did not complete %s: %v", ErrUnavailable, s.where, op, err)
	s.mu.Lock()
	if s.failSince.IsZero() {
		s.failSince = time.Now()
	}
	s.lastErr = werr
	s.mu.Unlock()
	return werr
}

func (s *Etcd) ok() {
	s.mu.Lock()
	s.lastErr, s.failSince = nil, time.Time{}
	s.mu.Unlock()
}

// Health is the store's last known state.
type Health struct {
	// OK is true when the last call succeeded.
	OK bool
	// Err is the last failure, FailingSince when failures began.
	Err          error
	FailingSince time.Time
}

// Health returns the state seen by the last call (no round trip).
func (s *Etcd) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Health{OK: s.lastErr == nil, Err: s.lastErr, FailingSince: s.failSince}
}

// Ping checks that etcd answers a linearizable read within the timeout.
func (s *Etcd) Ping(ctx context.Context) error {
	return s.retry(ctx, "a read", func(actx context.Context) error {
		_, err := s.cli.Get(actx, s.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err
	})
}

// List implements Store.
func (s *Etcd) List(ctx context.Context) (Snapshot, error) {
	var resp *clientv3.GetResponse
	err := s.retry(ctx, "a list", func(actx context.Context) (err error) {
		resp, err = s.cli.Get(actx, s.prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		return err
	})
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{Revision: resp.Header.Revision, Records: make([]Record, 0, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		r, err := s.record(kv)
		if err != nil {
			s.log.Warn().Err(err).Msg("skipping a foreign key in the store's prefix")
			continue
		}
		snap.Records = append(snap.Records, r)
	}
	return snap, nil
}

func (s *Etcd) record(kv *mvccpb.KeyValue) (Record, error) {
	k, err := s.recordKey(kv.Key)
	if err != nil {
		return Record{}, err
	}
	return Record{Key: k, Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision}, nil
}

// Commit implements Store: one etcd transaction whose comparisons are the
// ops' preconditions. When a comparison fails, the else branch reads the
// compared keys so the error names the key and what was found.
func (s *Etcd) Commit(ctx context.Context, ops ...Op) (int64, error) {
	if err := checkOps(ops); err != nil {
		return 0, err
	}
	var cmps []clientv3.Cmp
	var thens, elses []clientv3.Op
	var checked []Op
	for _, op := range ops {
		k := s.etcdKey(op.Key)
		switch {
		case op.Expect == Absent:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		case op.Expect > 0:
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", op.Expect))
		}
		if op.Expect != AnyRevision {
			elses = append(elses, clientv3.OpGet(k, clientv3.WithKeysOnly()))
			checked = append(checked, op)
		}
		if op.Delete {
			thens = append(thens, clientv3.OpDelete(k))
		} else {
			thens = append(thens, clientv3.OpPut(k, string(op.Value)))
		}
	}
	var resp *clientv3.TxnResponse
	tries := 0
	err := s.retry(ctx, "a write", func(actx context.Context) (err error) {
		tries++
		resp, err = s.cli.Txn(actx).If(cmps...).Then(thens...).Else(elses...).Commit()
		return err
	})
	if err != nil {
		return 0, err
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	if tries > 1 {
		// An earlier try may have committed before its answer was lost
		// (a leader change): if the store now holds exactly what this
		// commit writes, it did.
		if rev, ok := s.confirm(ctx, ops); ok {
			return rev, nil
		}
	}
	for i, op := range checked {
		var got int64
		if r := resp.Responses[i].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
			got = r.Kvs[0].ModRevision
		}
		if c := conflict(op, got); c != nil {
			return 0, c
		}
	}
	// Every precondition holds on the re-read: the key changed between
	// the comparison and the read. Report it as a conflict on the first.
	return 0, &ConflictError{Key: checked[0].Key, Expect: checked[0].Expect, Got: -1, Err: ErrConflict}
}

// Watch implements Store. It requires an etcd leader (a member cut off
// from the quorum ends the watch instead of going quiet), resumes from the
// next revision after any break, and resyncs from a fresh List when etcd
// reports the revision compacted.
func (s *Etcd) Watch(ctx context.Context, from int64) <-chan Event {
	ch := make(chan Event, 64)
	go s.watchLoop(ctx, from, ch)
	return ch
}

func (s *Etcd) watchLoop(ctx context.Context, next int64, ch chan<- Event) {
	defer close(ch)
	send := func(ev Event) bool {
		select {
		case ch <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	pause := watchRetryMin
	broken := false
	for ctx.Err() == nil {
		if next <= 0 {
			snap, err := s.List(ctx)
			if err != nil {
				if !broken {
					s.log.Warn().Err(err).Msg("watch: store unavailable; retrying")
					broken = true
				}
				if !sleepCtx(ctx, pause) {
					return
				}
				pause = min(2*pause, watchRetryMax)
				continue
			}
			if !send(Event{Kind: EventResync, Snapshot: &snap, Revision: snap.Revision}) {
				return
			}
			next = snap.Revision + 1
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.cli.Watch(wctx, s.prefix, clientv3.WithPrefix(), clientv3.WithRev(next))
		reason := ""
		for resp := range wch {
			if resp.CompactRevision > 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				s.log.Info().Int64(logfield.Revision, next).Int64("compact_revision", resp.CompactRevision).
					Msg("watch: revision compacted; resyncing from a full list")
				next = 0
				reason = "compacted"
				break
			}
			if err := resp.Err(); err != nil {
				reason = err.Error()
				break
			}
			if broken {
				s.log.Info().Int64(logfield.Revision, next).Msg("watch: resumed")
				broken = false
				pause = watchRetryMin
			}
			for _, e := range resp.Events {
				r, err := s.record(e.Kv)
				if err != nil {
					continue
				}
				kind := EventPut
				if e.Type == mvccpb.DELETE {
					kind, r.Value = EventDelete, nil
				}
				if !send(Event{Kind: kind, Record: r, Revision: e.Kv.ModRevision}) {
					cancel()
					return
				}
				next = e.Kv.ModRevision + 1
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if reason != "compacted" {
			if !broken {
				s.log.Warn().Str(logfield.Reason, reason).Int64(logfield.Revision, next).Msg("watch: broken; resuming")
				broken = true
			}
			if !sleepCtx(ctx, pause) {
				return
			}
			pause = min(2*pause, watchRetryMax)
		}
	}
}

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
