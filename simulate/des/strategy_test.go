package des

import (
	"testing"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/strategy"
)

func TestRule_TheLadderAcceptsEveryCatalogueAndSweepStrategy(t *testing.T) {
	all := append(strategy.All(), strategy.HardWithFactor(150), strategy.SoftWithLambda(50000))
	for _, s := range all {
		t.Run(s.Name, func(t *testing.T) {
			if err := validateStrategy(&s); err != nil {
				t.Fatal(err)
			}
			svc, eps := rule(&s, 4)
			if _, err := ladder.NewRouter(svc, eps, s.Env(), ladder.RouterConfig{}); err != nil {
				t.Fatalf("the ladder rejects the rule: %v", err)
			}
			wantEps, wantPD := 4, s.Shape == strategy.ShapePD
			if wantPD {
				wantEps = 5 // four prefill workers and the virtual decode endpoint
			}
			if len(eps) != wantEps || svc.PDDisagg != wantPD || svc.Selector != s.Selector || svc.KVExactMode != s.KVMode() || svc.CacheAware != s.CacheAware {
				t.Fatalf("rule %+v with %d endpoints; want %d endpoints and the strategy's keys", svc, len(eps), wantEps)
			}
		})
	}
}
