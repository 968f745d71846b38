package harness

import "testing"

func TestParseRoute_ReadsTierEndpointsAndFlags(t *testing.T) {
	tests := []struct {
		name string
		give string
		want Route
	}{
		{
			name: "tier 1.5 with spill and relief",
			give: "tier=1.5 prefill=2 decode=-1 via=no_overlap spill relief prefill_addr=127.0.7.4:8000 retries=1",
			want: Route{Tier: "1.5", Prefill: 2, Decode: -1, Via: "no_overlap", Spill: true, Relief: true, Retries: 1, OK: true},
		},
		{
			name: "single-pool selector keys as sel:<name>",
			give: "tier=sel sel=chwbl prefill=0 decode=-1 via=tokenize bound_walk prefill_addr=127.0.7.2:8000 retries=0",
			want: Route{Tier: "sel:chwbl", Prefill: 0, Decode: -1, Via: "tokenize", BoundWalk: true, OK: true},
		},
		{
			name: "P/D with a cold seed and a saturated law",
			give: "tier=1.5 prefill=1 decode=9 cold_seed saturated prefill_addr=a decode_addr=b retries=0",
			want: Route{Tier: "1.5", Prefill: 1, Decode: 9, ColdSeed: true, Saturated: true, OK: true},
		},
		{
			name: "llb answered without a decision",
			give: "tier=none error=no_healthy_backend",
			want: Route{Tier: "none", Prefill: -1, Decode: -1, Error: "no_healthy_backend", OK: true},
		},
		{
			name: "absent header",
			give: "",
			want: Route{Prefill: -1, Decode: -1},
		},
		{
			name: "unknown words are ignored",
			give: "tier=2 prefill=x decode=3 future_flag future=1",
			want: Route{Tier: "2", Prefill: -1, Decode: 3, OK: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseRoute(tt.give); got != tt.want {
				t.Fatalf("ParseRoute(%q) = %+v; want %+v", tt.give, got, tt.want)
			}
		})
	}
}
