package rulestore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/etcdconn"
	"github.com/llbproject/llb/internal/etcdtest"
)

// stores runs f over every implementation: one conformance suite, as the
// llm-d scheduler does for its plugins.
func stores(t *testing.T, f func(t *testing.T, s Store)) {
	t.Run("memory", func(t *testing.T) { f(t, NewMemory()) })
	t.Run("etcd", func(t *testing.T) {
		c := etcdtest.Start(t, etcdtest.Options{})
		f(t, openEtcd(t, c.Endpoints(), "c1", NamespaceRules))
	})
}

func openEtcd(t *testing.T, eps []string, cluster, ns string) *Etcd {
	t.Helper()
	cfg := etcdconn.Config{Endpoints: eps, DialTimeout: time.Second}
	cli, err := cfg.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	s, err := NewEtcd(cli, EtcdOptions{Cluster: cluster, Namespace: ns, Timeout: time.Second, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// next receives one event or fails after 5 s.
func next(t *testing.T, ch <-chan Event) Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no watch event within 5 s")
	}
	return Event{}
}

func TestConformance_CreateUpdateDeleteAndPreconditions(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := ctxT(t)
		r1, err := s.Commit(ctx, Create("10.0.0.1:80/tcp", []byte(`{"a":1}`)))
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		_, err = s.Commit(ctx, Create("10.0.0.1:80/tcp", []byte(`{"a":2}`)))
		if !errors.Is(err, ErrExists) {
			t.Fatalf("second create: got %v; want ErrExists", err)
		}
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Key != "10.0.0.1:80/tcp" || ce.Got != r1 {
			t.Fatalf("second create: got %#v; want a ConflictError naming the key at revision %d", ce, r1)
		}
		snap, err := s.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Records) != 1 || string(snap.Records[0].Value) != `{"a":1}` || snap.Records[0].ModRevision != r1 || snap.Revision < r1 {
			t.Fatalf("list: got %+v; want one record {a:1} at revision %d", snap, r1)
		}
		if _, err := s.Commit(ctx, Update("10.0.0.1:80/tcp", []byte(`{"a":3}`), r1-1)); !errors.Is(err, ErrConflict) {
			t.Fatalf("stale update: got %v; want ErrConflict", err)
		}
		r2, err := s.Commit(ctx, Update("10.0.0.1:80/tcp", []byte(`{"a":3}`), r1))
		if err != nil || r2 <= r1 {
			t.Fatalf("update: rev %d err %v; want a revision after %d", r2, err, r1)
		}
		if _, err := s.Commit(ctx, DeleteIf("10.0.0.1:80/tcp", r1)); !errors.Is(err, ErrConflict) {
			t.Fatalf("stale delete: got %v; want ErrConflict", err)
		}
		if _, err := s.Commit(ctx, DeleteIf("missing", 5)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("delete of a missing key with a revision: got %v; want ErrNotFound", err)
		}
		if _, err := s.Commit(ctx, DeleteIf("10.0.0.1:80/tcp", r2)); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := s.Commit(ctx, Delete("10.0.0.1:80/tcp")); err != nil {
			t.Fatalf("unconditional delete of a missing key: %v; want nil", err)
		}
		snap, _ = s.List(ctx)
		if len(snap.Records) != 0 {
			t.Fatalf("after delete: %d records; want 0", len(snap.Records))
		}
	})
}

func TestConformance_CommitIsAtomic(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := ctxT(t)
		if _, err := s.Commit(ctx, Put("b", []byte("old"))); err != nil {
			t.Fatal(err)
		}
		// a is new, b must not exist: the second fails, so a is not written.
		_, err := s.Commit(ctx, Create("a", []byte("x")), Create("b", []byte("y")))
		if !errors.Is(err, ErrExists) || !errorNames(err, "b") {
			t.Fatalf("got %v; want ErrExists naming b", err)
		}
		snap, _ := s.List(ctx)
		if len(snap.Records) != 1 || snap.Records[0].Key != "b" || string(snap.Records[0].Value) != "old" {
			t.Fatalf("after a failed commit: %+v; want only b=old", snap.Records)
		}
		if _, err := s.Commit(ctx, Put("a", nil), Put("a", nil)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("duplicate key: got %v; want ErrInvalid", err)
		}
		if _, err := s.Commit(ctx); !errors.Is(err, ErrInvalid) {
			t.Fatalf("empty commit: got %v; want ErrInvalid", err)
		}
	})
}

func errorNames(err error, key string) bool {
	var ce *ConflictError
	return errors.As(err, &ce) && ce.Key == key
}

func TestConformance_WatchDeliversInOrderFromARevision(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := ctxT(t)
		if _, err := s.Commit(ctx, Put("k/with/slashes and spaces", []byte("v0"))); err != nil {
			t.Fatal(err)
		}
		snap, _ := s.List(ctx)
		w := s.Watch(ctx, 0)
		ev := next(t, w)
		if ev.Kind != EventResync || ev.Snapshot == nil || len(ev.Snapshot.Records) != 1 || ev.Snapshot.Records[0].Key != "k/with/slashes and spaces" {
			t.Fatalf("first event: %+v; want a resync with the one record", ev)
		}
		from := s.Watch(ctx, snap.Revision+1)
		var revs []int64
		for i := 0; i < 3; i++ {
			r, err := s.Commit(ctx, Put(fmt.Sprintf("k%d", i), []byte{byte(i)}))
			if err != nil {
				t.Fatal(err)
			}
			revs = append(revs, r)
		}
		rd, err := s.Commit(ctx, Delete("k1"))
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range []<-chan Event{w, from} {
			for i, r := range revs {
				ev := next(t, ch)
				if ev.Kind != EventPut || ev.Record.Key != fmt.Sprintf("k%d", i) || ev.Revision != r || len(ev.Record.Value) != 1 {
					t.Fatalf("event %d: %+v; want put k%d at %d", i, ev, i, r)
				}
			}
			ev := next(t, ch)
			if ev.Kind != EventDelete || ev.Record.Key != "k1" || ev.Revision != rd {
				t.Fatalf("delete event: %+v; want delete k1 at %d", ev, rd)
			}
		}
	})
}

func TestConformance_WatchFromACompactedRevisionResyncs(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := ctxT(t)
		r1, _ := s.Commit(ctx, Put("a", []byte("1")))
		r2, _ := s.Commit(ctx, Put("b", []byte("2")))
		compact(t, s, r2)
		w := s.Watch(ctx, r1)
		ev := next(t, w)
		if ev.Kind != EventResync || len(ev.Snapshot.Records) != 2 || ev.Revision < r2 {
			t.Fatalf("got %+v; want a resync holding a and b at revision ≥ %d", ev, r2)
		}
		r3, _ := s.Commit(ctx, Put("c", []byte("3")))
		if ev := next(t, w); ev.Kind != EventPut || ev.Record.Key != "c" || ev.Revision != r3 {
			t.Fatalf("after the resync: %+v; want put c at %d", ev, r3)
		}
	})
}

func compact(t *testing.T, s Store, rev int64) {
	t.Helper()
	switch s := s.(type) {
	case *Memory:
		s.Compact(rev)
	case *Etcd:
		if _, err := s.cli.Compact(context.Background(), rev); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("no compaction for %T", s)
	}
}
