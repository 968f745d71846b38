package inventory

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
)

// Contract guard reasons (ContractState.Reason).
const (
	// ContractBlockSize: the engine's block_size differs from kvBlockSize.
	ContractBlockSize = "block_size"
	// ContractHashMismatch: stored runs re-hash to keys the engine did not
	// publish (wrong algorithm, seed or extra-key rules).
	ContractHashMismatch = "hash_mismatch"
	// ContractTokenCount: a stored run's token_ids do not cover its blocks,
	// so token-keyed mode cannot index it.
	ContractTokenCount = "token_count"
)

// ContractState is the hash-contract self-check as the router consumes it.
// While Tripped, Tier 1.5 must fall through with the hash_contract guard: the
// mirror's keys cannot be trusted to match the prompt's.
type ContractState struct {
	// Tripped is true while the guard is raised.
	Tripped bool
	// Reason is one of the Contract* constants ("" while not tripped).
	Reason string
	// Detail is one sentence for an operator: what differs and what to fix.
	Detail string
	// Verified counts stored runs whose keys were re-derived and matched.
	Verified uint64
	// Mismatched counts runs that contradicted the contract.
	Mismatched uint64
	// Unverifiable counts runs that could not be checked (unknown parent
	// digest, no extra_keys on the wire, unusual extra-key values).
	Unverifiable uint64
}

// Contract check tuning.
const (
	// contractTripAfter consecutive mismatching runs raise the guard (a
	// block-size difference raises it at once).
	contractTripAfter = 3
	// contractRecoverAfter consecutive good runs lower it again.
	contractRecoverAfter = 16
	// contractWarmup runs are all verified before sampling starts.
	contractWarmup = 64
	// contractSampleEvery: after warm-up, one verifiable run in this many is
	// re-hashed (re-hashing costs about as much as the prompt side).
	contractSampleEvery = 16
	// digestCacheSlots remembers verified digests so runs that continue a
	// verified run can be checked too.
	digestCacheSlots = 512
)

// knownDigest is one slot of the verified-digest cache.
type knownDigest struct {
	key uint64
	d   Digest
}

// contractChecker implements the self-check for one mirror. Single owner.
type contractChecker struct {
	blockSize  int
	exact      engineKeys // nil in token-keyed mode
	state      ContractState
	bad, good  int           // consecutive counts
	eligible   uint64        // verifiable runs seen (sampling counter)
	known      []knownDigest // exact mode only; digestCacheSlots entries
	digs       []Digest
	log        zerolog.Logger
	mismatches *metrics.Counter
	guard      *metrics.Gauge
}

func newContractChecker(blockSize int, exact engineKeys, log zerolog.Logger, g *metricGroup) *contractChecker {
	var known []knownDigest
	if exact != nil {
		known = make([]knownDigest, digestCacheSlots)
	}
	return &contractChecker{
		known:      known,
		blockSize:  blockSize,
		exact:      exact,
		log:        log,
		mismatches: g.counter(MetricContractMismatches),
		guard:      g.gauge(MetricContractGuard),
	}
}

// checkBlockSize compares an event's block_size (0 = not on the wire) with
// the configured one; false means the run must not be used.
func (c *contractChecker) checkBlockSize(ev *Event) bool {
	if ev.BlockSize == 0 || ev.BlockSize == c.blockSize {
		return true
	}
	c.fail(ContractBlockSize, fmt.Sprintf(
		"the engine publishes block_size=%d but the rule's kvBlockSize is %d; set kvBlockSize to the engine's --block-size",
		ev.BlockSize, c.blockSize), true)
	return false
}

// verify re-hashes a stored run in exact mode (sampled) and records the
// outcome.
func (c *contractChecker) verify(ev *Event) {
	if c.exact == nil {
		return
	}
	n := len(ev.BlockHashes)
	if n == 0 {
		return
	}
	parent, ok := c.parentDigest(ev)
	if !ok || len(ev.TokenIDs) != n*c.blockSize || (c.exact.needsExtraKeys() && !checkableExtras(ev, n)) {
		c.state.Unverifiable++
		return
	}
	c.eligible++
	if c.state.Verified+c.state.Mismatched >= contractWarmup && c.eligible%contractSampleEvery != 0 {
		return
	}
	var err error
	c.digs, err = c.exact.AppendRunDigests(c.digs[:0], parent, ev.TokenIDs, ev.ExtraKeys)
	if err != nil {
		c.state.Unverifiable++
		return
	}
	for i, d := range c.digs {
		if k := c.exact.eventKey(d); k != ev.BlockHashes[i] {
			c.fail(ContractHashMismatch, fmt.Sprintf(
				"%d consecutive stored runs re-hash to different keys (block %d of a run: engine %d, llb %d); %s",
				c.bad+1, i, ev.BlockHashes[i], k, c.exact.contractFix()), false)
			return
		}
	}
	for _, d := range c.digs {
		k := c.exact.eventKey(d)
		slot := &c.known[k%digestCacheSlots]
		slot.key, slot.d = k, d
	}
	c.ok()
}

// parentDigest finds the full digest a run chains from.
func (c *contractChecker) parentDigest(ev *Event) (Digest, bool) {
	switch {
	case !ev.HasParent:
		return Digest{}, true // NONE_HASH
	case ev.ParentDigest.Len() == c.exact.digestSize():
		return ev.ParentDigest, true
	}
	slot := &c.known[ev.Parent%digestCacheSlots]
	if slot.d.Len() != 0 && slot.key == ev.Parent {
		return slot.d, true
	}
	return Digest{}, false
}

// checkableExtras reports whether a run of n blocks carries extra_keys llb
// can re-hash.
func checkableExtras(ev *Event, n int) bool {
	return ev.HasExtraKeys && len(ev.ExtraKeys) == n && plainExtras(ev.ExtraKeys)
}

// plainExtras reports whether extra keys hold only values vLLM hashes as
// we re-encode them (maps would mean a typed variant we do not reproduce).
func plainExtras(vals []any) bool {
	for _, v := range vals {
		switch x := v.(type) {
		case map[string]any:
			return false
		case []any:
			if !plainExtras(x) {
				return false
			}
		}
	}
	return true
}

// ok records a run that honoured the contract.
func (c *contractChecker) ok() {
	c.state.Verified++
	c.bad = 0
	c.good++
	if c.state.Tripped && c.good >= contractRecoverAfter {
		c.log.Info().Str(logReason, c.state.Reason).Int(logCount, c.good).
			Msg("kv hash contract restored: stored runs match llb's keys again; Tier 1.5 re-enabled for this endpoint")
		c.state.Tripped, c.state.Reason, c.state.Detail = false, "", ""
		c.guard.Set(0)
	}
}

// fail records a contract violation; the guard trips at once when
// immediate, else after contractTripAfter consecutive violations.
func (c *contractChecker) fail(reason, detail string, immediate bool) {
	c.state.Mismatched++
	c.mismatches.Inc()
	c.good = 0
	c.bad++
	if c.state.Tripped || (!immediate && c.bad < contractTripAfter) {
		return
	}
	c.state.Tripped, c.state.Reason, c.state.Detail = true, reason, detail
	c.guard.Set(1)
	c.log.Warn().Str(logReason, reason).Msg("kv hash contract broken, Tier 1.5 falls through (hash_contract) for this endpoint: " + detail)
}
