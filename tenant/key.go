package tenant

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llbproject/llb/ladder"
)

// RawKeyPrefix starts every raw API key (LoxiLB's).
const RawKeyPrefix = "lxb_"

// Bounds of the records (a request that exceeds one is refused, so no
// write can make the tables grow without bound).
const (
	// MaxKeys is how many API keys llbd holds.
	MaxKeys = 10000
	// MaxLimits is how many tenant rate limits llbd holds.
	MaxLimits = 10000
	// MaxTenantLen bounds a tenant id; MaxNameLen a key's name and each
	// allowed model; MaxModels the allowed models of one key.
	MaxTenantLen = 128
	MaxNameLen   = 256
	MaxModels    = 256
	// MaxRate bounds rate_limit_rps, burst_size and rps; MaxTokensPerMin
	// tokens_per_min.
	MaxRate         = 1_000_000
	MaxTokensPerMin = 1_000_000_000_000
)

// Errors of the decide functions; the REST layer maps them to statuses.
// Test with errors.Is.
var (
	// ErrInvalid: a field is missing or out of range (400).
	ErrInvalid = errors.New("tenant: invalid")
	// ErrNotFound: no such key or tenant limit (404).
	ErrNotFound = errors.New("tenant: not found")
	// ErrFull: the table holds its maximum of records (422).
	ErrFull = errors.New("tenant: table full")
)

// Key is one API key as stored: everything but the raw key, of which only
// the SHA-256 is kept. JSON field names are LoxiLB's (ApiKeySummary), plus
// key_hash (stored, never served) and llb's class.
type Key struct {
	ID            string     `json:"key_id"`
	Hash          string     `json:"key_hash"`
	TenantID      string     `json:"tenant_id"`
	Name          string     `json:"name"`
	AllowedModels []string   `json:"allowed_models"`
	RateLimitRPS  int64      `json:"rate_limit_rps"`
	BurstSize     int64      `json:"burst_size"`
	TokensPerMin  int64      `json:"tokens_per_min"`
	CreatedAt     time.Time  `json:"created_at"`
	ExpiresAt     *time.Time `json:"expires_at,omitempty"`
	Enabled       bool       `json:"enabled"`
	// Class is the priority class of the key's requests and the highest
	// one a request may ask for with a header ("" is standard).
	Class string `json:"class,omitempty"`
}

// Limit is one tenant's rate limit across its keys (LoxiLB's
// TenantRateLimitEntry).
type Limit struct {
	TenantID     string    `json:"tenant_id"`
	RPS          int64     `json:"rps"`
	TokensPerMin int64     `json:"tokens_per_min"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// ClassOf is the key's class (standard when unset or unknown).
func (k *Key) ClassOf() ladder.Class {
	c, _ := ladder.ParseClass(k.Class)
	if k.Class == "" {
		return ladder.ClassStandard
	}
	return c
}

// Allows reports whether the key may use model: every model when its
// allow-list is empty.
func (k *Key) Allows(model string) bool {
	return len(k.AllowedModels) == 0 || slices.Contains(k.AllowedModels, model)
}

// Live reports whether the key may authenticate at now: enabled and not
// expired.
func (k *Key) Live(now time.Time) bool {
	return k.Enabled && (k.ExpiresAt == nil || now.Before(*k.ExpiresAt))
}

// Burst is the key's bucket size: burst_size, or rate_limit_rps when 0.
func (k *Key) Burst() int64 {
	if k.BurstSize > 0 {
		return k.BurstSize
	}
	return k.RateLimitRPS
}

// HashRaw is the stored form of a raw key: hex SHA-256.
func HashRaw(raw string) string {
	h := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(h[:])
}

// NewRawKey mints a key from 32 random bytes as LoxiLB does: the raw key
// is "lxb_" and their 64 hex digits, the key id the hex of the first 16.
func NewRawKey(random func([]byte) (int, error)) (raw, id string, err error) {
	if random == nil {
		random = rand.Read
	}
	b := make([]byte, 32)
	if _, err := random(b); err != nil {
		return "", "", fmt.Errorf("tenant: random key: %w", err)
	}
	return RawKeyPrefix + hex.EncodeToString(b), hex.EncodeToString(b[:16]), nil
}

// ValidTenant reports whether s can be a tenant id: 1–128 bytes of
// printable ASCII without spaces (it lands in headers, logs and labels).
func ValidTenant(s string) bool {
	if len(s) == 0 || len(s) > MaxTenantLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// checkKey reports every problem with k's operator-set fields at once.
func checkKey(k *Key) error {
	var errs []error
	switch {
	case strings.TrimSpace(k.TenantID) == "":
		errs = append(errs, invalid("tenant_id is required"))
	case !ValidTenant(k.TenantID):
		errs = append(errs, invalid("tenant_id %q: want 1 to %d printable characters without spaces", k.TenantID, MaxTenantLen))
	}
	if len(k.Name) > MaxNameLen {
		errs = append(errs, invalid("name is %d bytes; at most %d", len(k.Name), MaxNameLen))
	}
	if len(k.AllowedModels) > MaxModels {
		errs = append(errs, invalid("allowed_models has %d models; at most %d", len(k.AllowedModels), MaxModels))
	}
	for _, m := range k.AllowedModels {
		if m == "" || len(m) > MaxNameLen {
			errs = append(errs, invalid("allowed_models: each model is 1 to %d bytes", MaxNameLen))
			break
		}
	}
	errs = append(errs, checkRate("rate_limit_rps", k.RateLimitRPS, MaxRate), checkRate("burst_size", k.BurstSize, MaxRate),
		checkRate("tokens_per_min", k.TokensPerMin, MaxTokensPerMin))
	if k.Class != "" {
		if _, ok := ladder.ParseClass(k.Class); !ok {
			errs = append(errs, invalid("class %q: want critical, standard or sheddable", k.Class))
		}
	}
	return errors.Join(errs...)
}

func checkRate(field string, v, maxV int64) error {
	if v < 0 || v > maxV {
		return invalid("%s %d: want 0 (no limit) to %d", field, v, maxV)
	}
	return nil
}
