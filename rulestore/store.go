// Package rulestore keeps llb's configuration records — rules and external
// controller instructions — in a revisioned key/value store that several
// replicas share: etcd in a cluster (Etcd), memory for tests and as the
// reference semantics (Memory).
//
// The model is etcd's: every accepted Commit gets a revision, greater than
// every earlier one; List returns the records and the revision they are
// current at; Watch(from) delivers every change after a revision, in order,
// and when it cannot (the history was compacted, or the watch was cut off
// long enough to need it) it delivers one Resync event carrying a complete
// snapshot instead, so a watcher never silently misses a change.
//
// A Commit is acknowledged only after the store holds it (for Etcd: after
// the etcd write is committed by a quorum). Commits are atomic over their
// operations and may carry preconditions on each key's revision, which is
// how REST keeps LoxiLB's 409 when two replicas create the same rule at once.
//
// Keys and values are opaque to the store: restapi encodes a rule in the
// API's JSON model under its rule key; the controller store encodes an
// instruction under "<rule key>/<endpoint index>".
package rulestore

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrUnavailable: the store could not be reached or did not answer in
	// time; nothing is known to have been written. REST answers 503.
	ErrUnavailable = errors.New("rulestore: store unavailable")
	// ErrExists: a Create found the key present.
	ErrExists = errors.New("rulestore: key exists")
	// ErrNotFound: an operation that expects the key found it absent.
	ErrNotFound = errors.New("rulestore: key not found")
	// ErrConflict: the key's revision is not the one the operation expects
	// (another writer changed it first).
	ErrConflict = errors.New("rulestore: key changed concurrently")
	// ErrInvalid: the commit itself is unusable (empty key, duplicate key).
	ErrInvalid = errors.New("rulestore: invalid commit")
)

// Revision preconditions for Op.Expect.
const (
	// AnyRevision: no precondition.
	AnyRevision int64 = -1
	// Absent: the key must not exist (a create).
	Absent int64 = 0
)

// Record is one stored key and value.
type Record struct {
	// Key is the caller's key.
	Key string
	// Value is the caller's bytes.
	Value []byte
	// CreateRevision is the revision that created the key;
	// ModRevision the revision of its last change (of the delete, in a
	// delete event).
	CreateRevision, ModRevision int64
}

// Snapshot is the whole content at one revision, records sorted by key.
type Snapshot struct {
	Records  []Record
	Revision int64
}

// Op is one write inside a Commit.
type Op struct {
	// Key names the record; not empty.
	Key string
	// Value is the new content; ignored for a delete.
	Value []byte
	// Delete removes the key instead of writing it.
	Delete bool
	// Expect is the precondition on the key's ModRevision: AnyRevision
	// (none), Absent (the key must not exist), or the exact ModRevision
	// the caller last saw (the key must exist, unchanged).
	Expect int64
}

// Create writes key only if it does not exist.
func Create(key string, value []byte) Op { return Op{Key: key, Value: value, Expect: Absent} }

// Put writes key whatever it holds.
func Put(key string, value []byte) Op { return Op{Key: key, Value: value, Expect: AnyRevision} }

// Update writes key only if its ModRevision is still rev.
func Update(key string, value []byte, rev int64) Op { return Op{Key: key, Value: value, Expect: rev} }

// Delete removes key whatever it holds (a missing key is not an error).
func Delete(key string) Op { return Op{Key: key, Delete: true, Expect: AnyRevision} }

// DeleteIf removes key only if its ModRevision is still rev.
func DeleteIf(key string, rev int64) Op { return Op{Key: key, Delete: true, Expect: rev} }

// EventKind says what an Event carries.
type EventKind uint8

// Event kinds.
const (
	// EventPut: Record was created or changed.
	EventPut EventKind = iota + 1
	// EventDelete: Record.Key was deleted (Record.Value is empty).
	EventDelete
	// EventResync: Snapshot replaces everything the watcher knew; changes
	// between its previous state and the snapshot were not delivered one
	// by one.
	EventResync
)

func (k EventKind) String() string {
	switch k {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	case EventResync:
		return "resync"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one change seen by a watch.
type Event struct {
	Kind EventKind
	// Record is the changed record (EventPut, EventDelete).
	Record Record
	// Snapshot is the full content (EventResync).
	Snapshot *Snapshot
	// Revision is the store revision this event brings the watcher to.
	Revision int64
}

// Store is a revisioned record store shared by replicas.
//
// Implementations are safe for concurrent use.
type Store interface {
	// List returns every record and the revision they are current at.
	List(ctx context.Context) (Snapshot, error)
	// Commit applies ops atomically, all or none, and returns the new
	// revision. A failed precondition returns an error wrapping ErrExists,
	// ErrNotFound or ErrConflict (naming the key) and changes nothing; an
	// unreachable store returns ErrUnavailable. A commit whose outcome is
	// unknown (the store stopped answering after the request was sent)
	// returns ErrUnavailable too: callers learn the outcome from Watch.
	Commit(ctx context.Context, ops ...Op) (int64, error)
	// Watch delivers every change with a revision ≥ from, in revision
	// order; from ≤ 0 starts with a Resync of the current content. When
	// changes can no longer be delivered one by one (compaction, a long
	// disconnection) it delivers a Resync and continues from there. It
	// keeps trying while the store is unreachable and closes the channel
	// only when ctx ends.
	Watch(ctx context.Context, from int64) <-chan Event
}

// ConflictError says which key failed which precondition.
type ConflictError struct {
	// Key is the key whose precondition failed.
	Key string
	// Expect is the precondition; Got the key's ModRevision (0 = absent).
	Expect, Got int64
	// Err is ErrExists, ErrNotFound or ErrConflict.
	Err error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v: %q (expected revision %s, found %s)", e.Err, e.Key, revString(e.Expect), revString(e.Got))
}

// Unwrap returns the sentinel.
func (e *ConflictError) Unwrap() error { return e.Err }

func revString(r int64) string {
	switch {
	case r == AnyRevision:
		return "any"
	case r == Absent:
		return "absent"
	}
	return fmt.Sprint(r)
}

// conflict classifies a failed precondition of op against the key's
// current ModRevision got (0 = absent); nil when op's precondition holds.
func conflict(op Op, got int64) *ConflictError {
	switch {
	case op.Expect == AnyRevision:
		return nil
	case op.Expect == Absent && got != 0:
		return &ConflictError{Key: op.Key, Expect: op.Expect, Got: got, Err: ErrExists}
	case op.Expect > 0 && got == 0:
		return &ConflictError{Key: op.Key, Expect: op.Expect, Got: got, Err: ErrNotFound}
	case op.Expect > 0 && got != op.Expect:
		return &ConflictError{Key: op.Key, Expect: op.Expect, Got: got, Err: ErrConflict}
	}
	return nil
}

// checkOps rejects empty keys, a key written twice, and negative
// preconditions other than AnyRevision.
func checkOps(ops []Op) error {
	if len(ops) == 0 {
		return fmt.Errorf("%w: no operations", ErrInvalid)
	}
	seen := make(map[string]bool, len(ops))
	for _, op := range ops {
		if op.Key == "" {
			return fmt.Errorf("%w: empty key", ErrInvalid)
		}
		if seen[op.Key] {
			return fmt.Errorf("%w: key %q written twice in one commit", ErrInvalid, op.Key)
		}
		seen[op.Key] = true
		if op.Expect < AnyRevision {
			return fmt.Errorf("%w: key %q: expected revision %d", ErrInvalid, op.Key, op.Expect)
		}
	}
	return nil
}
