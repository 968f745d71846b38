// Package memfs is an in-memory statefs.FS with a crash-consistency model:
// test support for the catalog's state file (tests of catalog and restapi
// use it; the daemon never imports it).
package memfs

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/llbproject/llb/catalog/statefs"
)

// FS is an in-memory statefs.FS with a crash-consistency model, used to
// prove the state file's write ordering.
//
// Model: a file's content is durable only up to its last Sync; directory
// entries (create, rename, remove) are durable only after SyncDir. A crash
// loses anything not durable — in the worst case: after a crash every file
// holds only its synced bytes, and the directory holds either its last synced
// entries or all entries made since (both are possible orders on a real disk;
// with at most one pending rename, these two images cover every outcome).
//
// Crash injection: after CrashAfter mutating operations, the next operations
// fail with ErrCrash, as if the process had died there. Set CrashAfter and
// Fail before the operations they affect, not concurrently with them.
type FS struct {
	// CrashAfter is the mutating operations after which the process
	// "dies" (0: never).
	CrashAfter int
	// Fail maps an operation ("read", "write", "sync", "close", "rename",
	// "remove", "create", "syncdir") to an error it returns.
	Fail map[string]error

	mu      sync.Mutex
	names   map[string]*inode // current directory entries
	synced  map[string]*inode // directory entries as of the last SyncDir
	ops     int               // mutating operations so far
	crashed bool
	tempSeq int
}

type inode struct {
	data, durable []byte
}

// ErrCrash is what every operation returns once the crash point is passed.
var ErrCrash = errors.New("memfs: process crashed")

// New returns an empty FS.
func New() *FS {
	return &FS{names: map[string]*inode{}, synced: map[string]*inode{}, Fail: map[string]error{}}
}

// Ops is the mutating operations so far.
func (m *FS) Ops() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops
}

// Crashed reports whether the crash point was passed.
func (m *FS) Crashed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashed
}

// step accounts one mutating operation; it fails once the crash point is passed.
func (m *FS) step(op string) error {
	if m.crashed {
		return ErrCrash
	}
	if err := m.Fail[op]; err != nil {
		return err
	}
	m.ops++
	if m.CrashAfter > 0 && m.ops > m.CrashAfter {
		m.crashed = true
		return ErrCrash
	}
	return nil
}

// Images are the file systems a crash now could leave behind.
func (m *FS) Images() []*FS {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*FS
	for _, names := range []map[string]*inode{m.synced, m.names} {
		img := New()
		for name, ino := range names {
			n := &inode{data: slices.Clone(ino.durable), durable: slices.Clone(ino.durable)}
			img.names[name], img.synced[name] = n, n
		}
		out = append(out, img)
	}
	return out
}

// Put creates a durable file directly (test setup).
func (m *FS) Put(name string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := &inode{data: slices.Clone(data), durable: slices.Clone(data)}
	m.names[name], m.synced[name] = n, n
}

// Has reports whether name exists.
func (m *FS) Has(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.names[name]
	return ok
}

// Content is name's current bytes (nil when missing).
func (m *FS) Content(name string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n, ok := m.names[name]; ok {
		return slices.Clone(n.data)
	}
	return nil
}

func (m *FS) ReadFile(name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.Fail["read"]; err != nil {
		return nil, err
	}
	n, ok := m.names[name]
	if !ok {
		return nil, fmt.Errorf("memfs: %s: %w", name, fs.ErrNotExist)
	}
	return slices.Clone(n.data), nil
}

func (m *FS) CreateTemp(dir, pattern string) (statefs.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("create"); err != nil {
		return nil, err
	}
	m.tempSeq++
	name := filepath.Join(dir, strings.Replace(pattern, "*", fmt.Sprint(m.tempSeq), 1))
	n := &inode{}
	m.names[name] = n
	return &memFile{fs: m, name: name, ino: n}, nil
}

func (m *FS) Rename(oldpath, newpath string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("rename"); err != nil {
		return err
	}
	n, ok := m.names[oldpath]
	if !ok {
		return fmt.Errorf("memfs: rename %s: %w", oldpath, fs.ErrNotExist)
	}
	m.names[newpath] = n
	delete(m.names, oldpath)
	return nil
}

func (m *FS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("remove"); err != nil {
		return err
	}
	if _, ok := m.names[name]; !ok {
		return fmt.Errorf("memfs: remove %s: %w", name, fs.ErrNotExist)
	}
	delete(m.names, name)
	return nil
}

func (m *FS) SyncDir(string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("syncdir"); err != nil {
		return err
	}
	m.synced = maps.Clone(m.names)
	return nil
}

func (m *FS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for name := range m.names {
		if filepath.Dir(name) == dir {
			out = append(out, filepath.Base(name))
		}
	}
	slices.Sort(out)
	return out, nil
}

func (m *FS) MkdirAll(string) error { return nil }

type memFile struct {
	fs   *FS
	name string
	ino  *inode
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.fs.step("write"); err != nil {
		return 0, err
	}
	f.ino.data = append(f.ino.data, p...)
	return len(p), nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.fs.step("sync"); err != nil {
		return err
	}
	f.ino.durable = slices.Clone(f.ino.data)
	return nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.fs.step("close")
}
