package rule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Environment variables a rule's defaults come from (read once at start;
// LoxiLB's names where LoxiLB has the knob).
const (
	EnvNoneHashSeed     = "LLB_KV_NONE_HASH_SEED"
	EnvPrefillTimeout   = "LLB_PD_PREFILL_TIMEOUT_SEC"
	EnvDecodeTimeout    = "LLB_PD_DECODE_TIMEOUT_SEC"
	EnvStreamIdle       = "LLB_PD_IDLE_TIMEOUT_SEC"
	EnvMigrationLimit   = "LLB_MIGRATION_LIMIT"
	maxEnvTimeoutSecond = 86400
)

// ErrEnv classifies a bad environment value; the message names the variable.
var ErrEnv = errors.New("rule: bad environment value")

// DefaultsFromEnv reads the rule defaults the daemon takes from its
// environment (getenv is os.Getenv in cmd/). Unset or empty variables keep
// the defaults. Every bad value is reported at once, each naming its
// variable and wrapping ErrEnv. originErr is the already parsed
// LLB_PD_ORIGIN_ERR_THRESHOLD (ladder.Env).
func DefaultsFromEnv(getenv func(string) string, originErr int) (Defaults, error) {
	d := Defaults{OriginErrThreshold: &originErr}
	if v := getenv(EnvNoneHashSeed); v != "" {
		d.NoneHashSeed, d.NoneHashSeedSet = v, true
	}
	var errs []error
	seconds := func(name string, zeroIsOff bool) time.Duration {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return 0
		}
		lo := 1
		if zeroIsOff {
			lo = 0
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > maxEnvTimeoutSecond {
			what := "whole seconds 1–86400"
			if zeroIsOff {
				what = "whole seconds 0–86400 (0 turns it off)"
			}
			errs = append(errs, fmt.Errorf("%s=%q: want %s: %w", name, v, what, ErrEnv))
			return 0
		}
		if n == 0 {
			return -1
		}
		return time.Duration(n) * time.Second
	}
	d.PrefillTimeout = seconds(EnvPrefillTimeout, false)
	d.DecodeTimeout = seconds(EnvDecodeTimeout, true)
	d.StreamIdleTimeout = seconds(EnvStreamIdle, true)
	if v := strings.TrimSpace(getenv(EnvMigrationLimit)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxMigrationLimit {
			errs = append(errs, fmt.Errorf("%s=%q: want a whole number 0–%d (0 turns migration off): %w", EnvMigrationLimit, v, MaxMigrationLimit, ErrEnv))
		} else {
			d.MigrationLimit = &n
		}
	}
	return d, errors.Join(errs...)
}
