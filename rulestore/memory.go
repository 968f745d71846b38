package rulestore

import (
	"bytes"
	"context"
	"sort"
	"sync"
)

// Memory is a Store in process memory with etcd's semantics: the reference
// implementation the conformance tests hold Etcd to, and a store for tests
// of the store's users. Nothing survives the process.
type Memory struct {
	mu sync.Mutex
	// Guarded by mu.
	rev       int64
	recs      map[string]Record
	history   []Event // every Put/Delete in revision order, after compacted
	compacted int64   // changes at or below this revision are forgotten
	changed   chan struct{}
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store at revision 1 (etcd starts there too).
func NewMemory() *Memory {
	return &Memory{rev: 1, recs: map[string]Record{}, changed: make(chan struct{})}
}

// List implements Store.
func (m *Memory) List(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snapshotLocked(), nil
}

func (m *Memory) snapshotLocked() Snapshot {
	s := Snapshot{Revision: m.rev, Records: make([]Record, 0, len(m.recs))}
	for _, r := range m.recs {
		r.Value = bytes.Clone(r.Value)
		s.Records = append(s.Records, r)
	}
	sort.Slice(s.Records, func(i, j int) bool { return s.Records[i].Key < s.Records[j].Key })
	return s
}

// Commit implements Store.
func (m *Memory) Commit(ctx context.Context, ops ...Op) (int64, error) {
	if err := checkOps(ops); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range ops {
		if c := conflict(op, m.recs[op.Key].ModRevision); c != nil {
			return 0, c
		}
	}
	m.rev++
	for _, op := range ops {
		old, had := m.recs[op.Key]
		if op.Delete {
			if !had {
				continue
			}
			delete(m.recs, op.Key)
			m.history = append(m.history, Event{Kind: EventDelete, Record: Record{Key: op.Key, CreateRevision: old.CreateRevision, ModRevision: m.rev}, Revision: m.rev})
			continue
		}
		r := Record{Key: op.Key, Value: bytes.Clone(op.Value), CreateRevision: m.rev, ModRevision: m.rev}
		if had {
			r.CreateRevision = old.CreateRevision
		}
		m.recs[op.Key] = r
		m.history = append(m.history, Event{Kind: EventPut, Record: r, Revision: m.rev})
	}
	close(m.changed)
	m.changed = make(chan struct{})
	return m.rev, nil
}

// Compact forgets the change history at or below rev, as etcd's compaction
// does: a watch from an older revision gets a Resync.
func (m *Memory) Compact(rev int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rev <= m.compacted {
		return
	}
	m.compacted = rev
	i := sort.Search(len(m.history), func(i int) bool { return m.history[i].Revision > rev })
	m.history = append([]Event(nil), m.history[i:]...)
}

// Watch implements Store.
func (m *Memory) Watch(ctx context.Context, from int64) <-chan Event {
	ch := make(chan Event, 16)
	go func() {
		defer close(ch)
		next := from
		for {
			m.mu.Lock()
			var batch []Event
			if next <= 0 || next <= m.compacted {
				s := m.snapshotLocked()
				batch = []Event{{Kind: EventResync, Snapshot: &s, Revision: s.Revision}}
				next = s.Revision + 1
			} else {
				i := sort.Search(len(m.history), func(i int) bool { return m.history[i].Revision >= next })
				batch = append(batch, m.history[i:]...)
				if n := len(batch); n > 0 {
					next = batch[n-1].Revision + 1
				}
			}
			wait := m.changed
			m.mu.Unlock()
			for _, ev := range batch {
				ev.Record.Value = bytes.Clone(ev.Record.Value)
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				}
			}
			if len(batch) > 0 {
				continue
			}
			select {
			case <-wait:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}
