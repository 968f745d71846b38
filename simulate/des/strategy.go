package des

import (
	"fmt"
	"strconv"
	"time"

	"github.com/llbproject/llb/ladder"
	lbrule "github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/simulate/strategy"
)

// validateStrategy checks s (simulate/strategy) and that the ladder
// accepts its rule, built for two workers.
func validateStrategy(s *strategy.Strategy) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if s.IsPeer() {
		return nil
	}
	svc, eps := rule(s, 2)
	if err := ladder.ValidateRule(&svc, eps); err != nil {
		return fmt.Errorf("strategy %q: %w: %w", s.Name, ErrConfig, err)
	}
	return nil
}

// sessionTTL is the simulated rule's Tier-0 pin lifetime: LoxiLB's default,
// as rule.Compile gives a rule without pd_session_ttl_sec.
const sessionTTL = lbrule.DefaultPDSessionTTLSec * time.Second

// rule builds the ladder rule of s for n workers, with the values
// rule.Compile gives a rule that leaves them unset. A P/D rule is simulated
// in its single-pool equivalent: n prefill endpoints (indexes 0..n-1, the
// workers) and one virtual decode endpoint (index n) that completes the
// rule; the whole request (prefill and decode) runs on the chosen prefill
// worker.
func rule(s *strategy.Strategy, n int) (ladder.ServiceSpec, []ladder.EndpointSpec) {
	svc := ladder.ServiceSpec{
		Name:                s.Name,
		Selector:            s.Selector,
		KVExactMode:         s.KVMode(),
		KVBlockSize:         lbrule.DefaultKVBlockSize,
		CacheThresholdPct:   lbrule.DefaultPDCacheThreshold,
		BalanceAbsThreshold: lbrule.DefaultPDBalanceAbsThreshold,
		SessionTTL:          sessionTTL,
		PersistTTL:          lbrule.DefaultPersistTTL,
	}
	eps := make([]ladder.EndpointSpec, 0, n+1)
	for i := range n {
		eps = append(eps, ladder.EndpointSpec{Addr: workerAddr(i), Weight: 1})
	}
	if s.Shape == strategy.ShapePD {
		svc.PDDisagg = true
		svc.CacheAware = s.CacheAware
		for i := range eps {
			eps[i].Role = ladder.RolePrefill
		}
		eps = append(eps, ladder.EndpointSpec{Addr: workerAddr(n), Role: ladder.RoleDecode, Weight: 1})
	}
	return svc, eps
}

// workerAddr is worker i's address: it seeds the CHWBL ring's virtual
// nodes, as the endpoint's ip:port does in llbd.
func workerAddr(i int) string { return "10.0.0." + strconv.Itoa(i+1) + ":8000" }
