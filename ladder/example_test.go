package ladder_test

import (
	"fmt"
	"time"

	"github.com/llbproject/llb/ladder"
)

// A P/D rule with KV-exact routing: the request's chain overlaps 6 blocks on
// prefill endpoint 0 and 2 on endpoint 1; endpoint 0 is down, so the
// decision falls to the second-best prefill endpoint, never to a decode one.
func ExampleRouter_Decide() {
	env, _, err := ladder.ParseEnv(func(string) string { return "" })
	if err != nil {
		panic(err)
	}
	// A ServiceSpec is taken literally: rule.Compile fills it from a
	// LoxiLB rule, this one is written out with LoxiLB's defaults.
	svc := ladder.ServiceSpec{Name: "chat", PDDisagg: true, KVExactMode: ladder.KVPrefill,
		KVBlockSize: 16, CacheThresholdPct: 20, BalanceAbsThreshold: 3, SessionTTL: 300 * time.Second}
	eps := []ladder.EndpointSpec{
		{Addr: "192.0.2.1:8100", Role: ladder.RolePrefill},
		{Addr: "192.0.2.2:8100", Role: ladder.RolePrefill},
		{Addr: "198.51.100.1:8200", Role: ladder.RoleDecode},
	}
	router, err := ladder.NewRouter(svc, eps, env, ladder.RouterConfig{})
	if err != nil {
		panic(err)
	}
	key, _ := ladder.SessionKeyFor("user-7", "")
	req := ladder.Request{SessionKey: key, KV: ladder.KVInput{PromptBlocks: 8}}
	snap := ladder.Snapshot{Endpoints: []ladder.EndpointView{
		{Down: true, InventoryBlocks: 900, Overlap: 6},
		{ActiveConns: 1, InventoryBlocks: 900, Overlap: 2},
		{ActiveConns: 3},
	}}
	d, err := router.Decide(time.Now(), &req, &snap)
	if err != nil {
		panic(err)
	}
	fmt.Println(d.String())
	fmt.Println("pin after success:", d.PinSession)
	// Output:
	// tier=1.5 prefill=1 decode=2 via=session_miss,cache_aware_off excluded_winner
	// pin after success: true
}
