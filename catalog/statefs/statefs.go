// Package statefs is the file-system surface the catalog's state file is
// written through: the few calls an atomic, durable save needs, so tests can
// inject failures and crashes between any two of them (memfs).
package statefs

import (
	"fmt"
	"os"
)

// FS is the file-system surface the state store uses. It exists so tests can
// inject failures and crashes between any two steps of a save and check that
// what survives is always the old or the new configuration.
type FS interface {
	// ReadFile reads a whole file; a missing file is an os.ErrNotExist error.
	ReadFile(name string) ([]byte, error)
	// CreateTemp creates a new file in dir, like os.CreateTemp.
	CreateTemp(dir, pattern string) (File, error)
	// Rename atomically replaces newpath with oldpath.
	Rename(oldpath, newpath string) error
	// Remove deletes a file.
	Remove(name string) error
	// SyncDir makes the directory's entries (creates, renames) durable.
	SyncDir(dir string) error
	// ReadDir lists the names in dir.
	ReadDir(dir string) ([]string, error)
	// MkdirAll creates dir and its parents with permission 0700.
	MkdirAll(dir string) error
}

// File is a file being written by the store.
type File interface {
	// Name is the file's path.
	Name() string
	// Write appends p.
	Write(p []byte) (int, error)
	// Sync makes the written data durable.
	Sync() error
	// Close closes the file.
	Close() error
}

// OSFS is FS on the operating system's file system.
type OSFS struct{}

// ReadFile implements FS.
func (OSFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

// CreateTemp implements FS.
func (OSFS) CreateTemp(dir, pattern string) (File, error) { return os.CreateTemp(dir, pattern) }

// Rename implements FS.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o700) }

// SyncDir implements FS by fsyncing the directory.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir for sync: %w", err)
	}
	syncErr := d.Sync()
	closeErr := d.Close()
	if syncErr != nil {
		return fmt.Errorf("fsync dir: %w", syncErr)
	}
	return closeErr
}

// ReadDir implements FS.
func (OSFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}
