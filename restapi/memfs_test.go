package restapi

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// memFS is an in-memory FS with a crash-consistency model, used to prove the
// state store's write ordering.
//
// Model: a file's content is durable only up to its last Sync; directory
// entries (create, rename, remove) are durable only after SyncDir. A crash
// loses anything not durable — in the worst case: after a crash every file
// holds only its synced bytes, and the directory holds either its last synced
// entries or all entries made since (both are possible orders on a real disk;
// with at most one pending rename, these two images cover every outcome).
//
// Crash injection: after crashAfter mutating operations, the next operations
// fail with errCrash, as if the process had died there.
type memFS struct {
	mu         sync.Mutex
	names      map[string]*inode // current directory entries
	synced     map[string]*inode // directory entries as of the last SyncDir
	ops        int               // mutating operations so far
	crashAfter int               // 0: never crash
	crashed    bool
	fail       map[string]error // op name → injected error
	tempSeq    int
}

type inode struct {
	data, durable []byte
}

var errCrash = errors.New("memfs: process crashed")

func newMemFS() *memFS {
	return &memFS{names: map[string]*inode{}, synced: map[string]*inode{}, fail: map[string]error{}}
}

// step accounts one mutating operation; it fails once the crash point is passed.
func (m *memFS) step(op string) error {
	if m.crashed {
		return errCrash
	}
	if err := m.fail[op]; err != nil {
		return err
	}
	m.ops++
	if m.crashAfter > 0 && m.ops > m.crashAfter {
		m.crashed = true
		return errCrash
	}
	return nil
}

// images are the file systems a crash now could leave behind.
func (m *memFS) images() []*memFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*memFS
	for _, names := range []map[string]*inode{m.synced, m.names} {
		img := newMemFS()
		for name, ino := range names {
			n := &inode{data: slices.Clone(ino.durable), durable: slices.Clone(ino.durable)}
			img.names[name], img.synced[name] = n, n
		}
		out = append(out, img)
	}
	return out
}

// put creates a durable file directly (test setup).
func (m *memFS) put(name string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := &inode{data: slices.Clone(data), durable: slices.Clone(data)}
	m.names[name], m.synced[name] = n, n
}

func (m *memFS) has(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.names[name]
	return ok
}

func (m *memFS) content(name string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n, ok := m.names[name]; ok {
		return slices.Clone(n.data)
	}
	return nil
}

func (m *memFS) ReadFile(name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fail["read"]; err != nil {
		return nil, err
	}
	n, ok := m.names[name]
	if !ok {
		return nil, fmt.Errorf("memfs: %s: %w", name, fs.ErrNotExist)
	}
	return slices.Clone(n.data), nil
}

func (m *memFS) CreateTemp(dir, pattern string) (File, error) {
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

func (m *memFS) Rename(oldpath, newpath string) error {
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

func (m *memFS) Remove(name string) error {
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

func (m *memFS) SyncDir(string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("syncdir"); err != nil {
		return err
	}
	m.synced = maps.Clone(m.names)
	return nil
}

func (m *memFS) ReadDir(dir string) ([]string, error) {
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

func (m *memFS) MkdirAll(string) error { return nil }

type memFile struct {
	fs   *memFS
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
