package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/llbproject/llb/catalog/statefs"
	"github.com/llbproject/llb/tenant"
)

// State file layout.
const (
	// StateFileName is the rules file in the state directory.
	StateFileName = "rules.json"
	// stateFormat and stateVersion identify the envelope.
	stateFormat  = "llb-rules"
	stateVersion = 1
	tempPrefix   = StateFileName + ".tmp-"
)

// stateEnvelope is the versioned content of rules.json. Each rule is stored in
// LoxiLB's JSON model, so the file is readable and any entry can be re-POSTed.
type stateEnvelope struct {
	Format  string       `json:"format"`  // always "llb-rules"
	Version int          `json:"version"` // 1; another version is moved aside, not guessed at
	SavedAt time.Time    `json:"savedAt"` // when the file was written
	Rules   []storedRule `json:"rules"`   // in creation order
	// APIKeys and TenantLimits are the AI gateway's keys (their SHA-256,
	// never the raw key) and tenant limits; absent when there are none.
	APIKeys      []tenant.Key   `json:"apiKeys,omitempty"`
	TenantLimits []tenant.Limit `json:"tenantLimits,omitempty"`
}

// storedRule is one rule in the state file.
type storedRule struct {
	LastUpdated time.Time       `json:"lastUpdated"` // the rule's last configuration change
	Entry       json.RawMessage `json:"entry"`       // the rule in the API's JSON model
}

// StateFile persists the catalog to <dir>/rules.json: a versioned envelope with
// one section per kind of record (rules; API keys and tenant limits). A kind
// joins by adding its section to stateEnvelope and to encodeState.
//
// Save is atomic and durable: the new content goes to a temporary file in the
// same directory, which is fsynced, closed and renamed over rules.json, and
// the directory is fsynced. A crash at any point leaves rules.json holding
// either the previous or the new content, never a mix or nothing.
type StateFile struct {
	fs   statefs.FS
	dir  string
	name string
	now  func() time.Time
}

// NewStateFile returns the state file <dir>/<name> on fsys (name is
// StateFileName, or a cluster replica's cache of the shared rules); now
// stamps saves and names moved-aside files.
func NewStateFile(fsys statefs.FS, dir, name string, now func() time.Time) *StateFile {
	return &StateFile{fs: fsys, dir: dir, name: name, now: now}
}

// Path is the rules file's path.
func (s *StateFile) Path() string { return filepath.Join(s.dir, s.name) }

// tempPrefix names the temporary files of a save.
func (s *StateFile) tempPrefix() string { return s.name + ".tmp-" }

// save writes the rules t and the keys k (nil: none) durably; see
// StateFile.
func (s *StateFile) save(t *Rules, k *tenant.Table) (err error) {
	data, err := encodeState(s.now(), t.order, k)
	if err != nil {
		return err
	}

	f, err := s.fs.CreateTemp(s.dir, s.tempPrefix()+"*")
	if err != nil {
		return fmt.Errorf("restapi: create temp state file in %s: %w", s.dir, err)
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				_ = f.Close()
			}
			_ = s.fs.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("restapi: write %s: %w", tmp, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("restapi: fsync %s: %w", tmp, err)
	}
	closed = true
	if err = f.Close(); err != nil {
		return fmt.Errorf("restapi: close %s: %w", tmp, err)
	}
	if err = s.fs.Rename(tmp, s.Path()); err != nil {
		return fmt.Errorf("restapi: rename %s to %s: %w", tmp, s.Path(), err)
	}
	if err = s.fs.SyncDir(s.dir); err != nil {
		// The rename happened; only its durability is in doubt. Report it:
		// the caller must not claim the change is durable.
		return fmt.Errorf("restapi: fsync %s after rename: %w", s.dir, err)
	}
	return nil
}

// encodeState writes the envelope by hand, one rule per line, from each
// record's cached JSON: a save costs a copy of the bytes, not a re-encode.
// The result is the stateEnvelope's JSON.
func encodeState(savedAt time.Time, recs []*RuleRecord, k *tenant.Table) ([]byte, error) {
	n := 128
	for _, r := range recs {
		n += len(r.encoded) + 64
	}
	var keys, limits [][]byte
	if k != nil {
		for _, key := range k.Keys("") {
			b, err := json.Marshal(key)
			if err != nil {
				return nil, fmt.Errorf("restapi: encode API key %s: %w", key.ID, err)
			}
			keys = append(keys, b)
			n += len(b) + 8
		}
		for _, l := range k.Limits() {
			b, err := json.Marshal(l)
			if err != nil {
				return nil, fmt.Errorf("restapi: encode tenant limit %s: %w", l.TenantID, err)
			}
			limits = append(limits, b)
			n += len(b) + 8
		}
	}
	b := make([]byte, 0, n)
	b = fmt.Appendf(b, "{\n  \"format\": %q,\n  \"version\": %d,\n  \"savedAt\": %q,\n  \"rules\": [",
		stateFormat, stateVersion, savedAt.UTC().Format(time.RFC3339Nano))
	for i, r := range recs {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "\n    {\"lastUpdated\": %q, \"entry\": ", r.Updated.UTC().Format(time.RFC3339Nano))
		b = append(b, r.encoded...)
		b = append(b, '}')
	}
	b = append(b, "\n  ]"...)
	for _, sec := range []struct {
		name string
		recs [][]byte
	}{{"apiKeys", keys}, {"tenantLimits", limits}} {
		if len(sec.recs) == 0 {
			continue
		}
		b = fmt.Appendf(b, ",\n  %q: [", sec.name)
		for i, r := range sec.recs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, "\n    "...)
			b = append(b, r...)
		}
		b = append(b, "\n  ]"...)
	}
	return append(b, "\n}\n"...), nil
}

// loaded is what load found on disk.
type loaded struct {
	rules  []storedRule
	keys   []tenant.Key
	limits []tenant.Limit
	// movedTo is where an unusable rules.json was moved, and problem why.
	movedTo, problem string
	// staleTemps counts leftover temporary files removed (a crash mid-save).
	staleTemps int
}

// load reads rules.json. A missing file is an empty configuration. A file
// that cannot be read or parsed, or has an unknown format or version, is
// moved aside to rules.json.corrupt-<UTC timestamp> and reported in the
// result; if it cannot be moved, load fails, because carrying on would
// overwrite it on the next save.
func (s *StateFile) load() (loaded, error) {
	var res loaded
	if err := s.fs.MkdirAll(s.dir); err != nil {
		return res, fmt.Errorf("restapi: create state dir %s: %w", s.dir, err)
	}
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return res, fmt.Errorf("restapi: list state dir %s: %w", s.dir, err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, s.tempPrefix()) {
			if err := s.fs.Remove(filepath.Join(s.dir, n)); err == nil {
				res.staleTemps++
			}
		}
	}
	data, err := s.fs.ReadFile(s.Path())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return res, nil
	case err != nil:
		return s.moveAside(res, fmt.Sprintf("unreadable: %v", err))
	}
	var env stateEnvelope
	if err := json.Unmarshal(data, &env); err != nil {
		return s.moveAside(res, fmt.Sprintf("not valid JSON: %v", err))
	}
	if env.Format != stateFormat || env.Version != stateVersion {
		return s.moveAside(res, fmt.Sprintf("unknown format %q version %d (this llbd reads %q version %d)",
			env.Format, env.Version, stateFormat, stateVersion))
	}
	res.rules, res.keys, res.limits = env.Rules, env.APIKeys, env.TenantLimits
	return res, nil
}

func (s *StateFile) moveAside(res loaded, problem string) (loaded, error) {
	dst := s.asideName("corrupt")
	if err := s.fs.Rename(s.Path(), dst); err != nil {
		return res, fmt.Errorf("restapi: state file %s is %s, and moving it aside failed (refusing to start and overwrite it): %w",
			s.Path(), problem, err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return res, fmt.Errorf("restapi: fsync %s after moving the state file aside: %w", s.dir, err)
	}
	res.movedTo, res.problem = dst, problem
	return res, nil
}

// asideName is <rules.json>.<what>-<UTC timestamp>, unique in the directory.
func (s *StateFile) asideName(what string) string {
	base := s.Path() + "." + what + "-" + s.now().UTC().Format("20060102T150405Z")
	names, _ := s.fs.ReadDir(s.dir)
	taken := make(map[string]bool, len(names))
	for _, n := range names {
		taken[filepath.Join(s.dir, n)] = true
	}
	name := base
	for i := 1; taken[name]; i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	return name
}

// saveRejected writes records that no longer validate to
// rules.json.rejected-<timestamp>, durably, so a restore never drops them.
func (s *StateFile) saveRejected(rules []storedRule, keys []tenant.Key, limits []tenant.Limit) (string, error) {
	env := stateEnvelope{Format: stateFormat, Version: stateVersion, SavedAt: s.now().UTC(), Rules: rules,
		APIKeys: keys, TenantLimits: limits}
	data, err := json.MarshalIndent(&env, "", "  ")
	if err != nil {
		return "", fmt.Errorf("restapi: encode rejected rules: %w", err)
	}
	dst := s.asideName("rejected")
	f, err := s.fs.CreateTemp(s.dir, s.tempPrefix()+"*")
	if err != nil {
		return "", fmt.Errorf("restapi: create %s: %w", dst, err)
	}
	_, werr := f.Write(append(data, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = s.fs.Remove(f.Name())
		return "", fmt.Errorf("restapi: write %s: %w", dst, err)
	}
	if err := s.fs.Rename(f.Name(), dst); err != nil {
		_ = s.fs.Remove(f.Name())
		return "", fmt.Errorf("restapi: rename to %s: %w", dst, err)
	}
	return dst, s.fs.SyncDir(s.dir)
}
