package main

import (
	"strings"
	"testing"

	"github.com/llbproject/llb/rule"
)

// The two curl bodies of the routing-hierarchy page (spec/routing-hierarchy.txt),
// verbatim.
const (
	seedPDBody = `{
  "serviceArguments": {
    "externalIP": "10.10.10.254",
    "port": 2020,
    "protocol": "tcp",
    "sel": 0,
    "mode": 4,
    "host": "10.10.10.254",
    "pd_disagg_mode": true,
    "pd_cache_aware_mode": true,
    "kvExactMode": 1,
    "kvZmqPort": 5557,
    "kvHashAlgo": "sha256_cbor",
    "kvBlockSize": 16
  },
  "endpoints": [
    { "endpointIP": "192.0.2.1", "targetPort": 8100, "weight": 1, "ep_role": 1, "nixl_port": 5600 },
    { "endpointIP": "198.51.100.1", "targetPort": 8200, "weight": 1, "ep_role": 2, "nixl_port": 5600 }
  ]
}`
	seedCHWBLBody = `{
  "serviceArguments": {
    "externalIP": "10.10.10.254",
    "port": 2021,
    "protocol": "tcp",
    "sel": 8,
    "mode": 4,
    "host": "10.10.10.254"
  },
  "endpoints": [
    { "endpointIP": "192.0.2.1", "targetPort": 8000, "weight": 1 },
    { "endpointIP": "198.51.100.1", "targetPort": 8000, "weight": 1 }
  ]
}`
)

// The flag spellings of the two seed examples.
var (
	seedPDFlags = []string{"10.10.10.254", "--tcp=2020", "--select=rr", "--mode=fullproxy", "--host=10.10.10.254",
		"--pd-disagg", "--pd-cache-aware", "--kv-exact-mode=1", "--kv-zmq-port=5557", "--kv-hash-algo=sha256_cbor",
		"--kv-block-size=16", "--endpoints=192.0.2.1:8100:1:prefill:5600,198.51.100.1:8200:1:decode:5600"}
	seedCHWBLFlags = []string{"10.10.10.254", "--tcp=2021:8000", "--select=chwbl", "--host=10.10.10.254",
		"--endpoints=192.0.2.1:1,198.51.100.1:1"}
)

func TestCreate_FlagsProduceTheRuleJSON(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"pd_seed_example", seedPDFlags, seedPDBody},
		{"chwbl_seed_example", seedCHWBLFlags, seedCHWBLBody},
		{
			"pd_seed_with_short_aliases_and_loxicmd_role_lists",
			[]string{"10.10.10.254", "--tcp=2020", "--host=10.10.10.254", "--pd", "--pd-cache-aware",
				"--kv-exact-mode=1", "--kv-zmq-port=5557", "--kv-hash-algo=sha256_cbor", "--kv-block-size=16",
				"--endpoints=192.0.2.1:8100:1,198.51.100.1:8200:1", "--ep-role=prefill,decode", "--nixl-port=5600,5600"},
			seedPDBody,
		},
		{
			"endpoint_port_comes_from_tcp_target_port",
			[]string{"192.168.0.200", "--tcp=80:32015", "--endpoints=10.212.0.1:1,10.212.0.2:2", "--mode=default"},
			`{"serviceArguments":{"externalIP":"192.168.0.200","port":80,"protocol":"tcp"},
			  "endpoints":[{"endpointIP":"10.212.0.1","targetPort":32015,"weight":1},{"endpointIP":"10.212.0.2","targetPort":32015,"weight":2}]}`,
		},
		{
			"explicit_endpoint_port_overrides_the_target_port",
			[]string{"10.0.0.1", "--tcp=8000:8000", "--endpoints=10.0.0.2:1,10.0.0.3:8001:1"},
			`{"serviceArguments":{"externalIP":"10.0.0.1","port":8000,"protocol":"tcp","mode":4},
			  "endpoints":[{"endpointIP":"10.0.0.2","targetPort":8000,"weight":1},{"endpointIP":"10.0.0.3","targetPort":8001,"weight":1}]}`,
		},
		{
			"port_range_and_udp",
			[]string{"10.0.0.1", "--udp=8080-8081:80", "--mode=fullnat", "--endpoints=10.0.0.2:1"},
			`{"serviceArguments":{"externalIP":"10.0.0.1","port":8080,"portMax":8081,"protocol":"udp","mode":2},
			  "endpoints":[{"endpointIP":"10.0.0.2","targetPort":80,"weight":1}]}`,
		},
		{
			"ipv6_vip_and_endpoints",
			[]string{"[2001:db8::10]", "--tcp=80:8000", "--endpoints=[2001:db8::1]:1,[2001:db8::2]:8001:2,2001:db8::3:4"},
			`{"serviceArguments":{"externalIP":"2001:db8::10","port":80,"protocol":"tcp","mode":4},
			  "endpoints":[{"endpointIP":"2001:db8::1","targetPort":8000,"weight":1},
			               {"endpointIP":"2001:db8::2","targetPort":8001,"weight":2},
			               {"endpointIP":"2001:db8::3","targetPort":8000,"weight":4}]}`,
		},
		{
			"breaker_sse_and_balance_aliases",
			[]string{"10.0.0.1", "--tcp=2020", "--cb", "--sse", "--pd", "--pd-balance-abs=5", "--pd-session-ttl=600",
				"--pd-cache-threshold=30", "--endpoints=10.0.0.2:8100:1:prefill,10.0.0.3:8200:1:decode"},
			`{"serviceArguments":{"externalIP":"10.0.0.1","port":2020,"protocol":"tcp","mode":4,"cb_enable":true,"sse_mode":true,
			  "pd_disagg_mode":true,"pd_balance_abs_threshold":5,"pd_session_ttl_sec":600,"pd_cache_threshold":30},
			  "endpoints":[{"endpointIP":"10.0.0.2","targetPort":8100,"weight":1,"ep_role":1},{"endpointIP":"10.0.0.3","targetPort":8200,"weight":1,"ep_role":2}]}`,
		},
		{
			"single_pool_kv_exact_with_llb_extensions",
			[]string{"10.0.0.1", "--tcp=2022:8000", "--kv-exact-mode=3", "--kv-none-hash-seed=", "--kv-replay-port=5558",
				"--kv-block-key=tokens", "--kv-warmup=10", "--endpoints=10.0.0.2:1,10.0.0.3:1"},
			`{"serviceArguments":{"externalIP":"10.0.0.1","port":2022,"protocol":"tcp","mode":4,"kvExactMode":3,
			  "kvNoneHashSeed":"","kvReplayPort":5558,"kvBlockKey":"tokens","kvWarmupSec":10},
			  "endpoints":[{"endpointIP":"10.0.0.2","targetPort":8000,"weight":1},{"endpointIP":"10.0.0.3","targetPort":8000,"weight":1}]}`,
		},
		{
			"pointer_keys_are_sent_when_given_even_at_zero",
			[]string{"10.0.0.1", "--tcp=2021:8000", "--select=wrr-hash", "--chwbl-hash-flags=0", "--chwbl-hash-level=2",
				"--chwbl-cache-salt=false", "--fc-max-queue-depth=0", "--fc-mode=inherit", "--endpoints=10.0.0.2:1"},
			`{"serviceArguments":{"externalIP":"10.0.0.1","port":2021,"protocol":"tcp","sel":10,"mode":4,
			  "chwbl_prefix_hash_flags":0,"chwbl_prefix_hash_level":2,"chwbl_enable_cache_salt":false,
			  "fc_max_queue_depth":0,"fc_mode":"inherit"},
			  "endpoints":[{"endpointIP":"10.0.0.2","targetPort":8000,"weight":1}]}`,
		},
		{
			"core_probe_and_l7_flags",
			[]string{"10.0.0.1", "--tcp=443:8000", "--name=chat", "--mark=7", "--security=https", "--probetype=http",
				"--probeport=8000", "--probereq=/health", "--proberesp=ok", "--probetimeout=5", "--proberetries=3",
				"--inatimeout=60", "--path-prefix=/v1", "--path-match-mode=prefix", "--model-name=llama",
				"--backend-protocol=http1", "--admin-down", "--sources=10.0.0.0/8", "--endpoints=10.0.0.2:1"},
			`{"serviceArguments":{"externalIP":"10.0.0.1","port":443,"protocol":"tcp","mode":4,"name":"chat","block":7,
			  "security":1,"probetype":"http","probeport":8000,"probereq":"/health","proberesp":"ok","probeTimeout":5,
			  "probeRetries":3,"inactiveTimeOut":60,"path_prefix":"/v1","path_match_mode":"prefix","model_name":"llama",
			  "backend_protocol":"http1","adminStateUp":false},
			  "endpoints":[{"endpointIP":"10.0.0.2","targetPort":8000,"weight":1}],
			  "allowedSources":[{"prefix":"10.0.0.0/8"}]}`,
		},
		{
			"attach_endpoints",
			[]string{"10.0.0.1", "--tcp=2021:8000", "--attachEP", "--endpoints=10.0.0.9:1"},
			`{"serviceArguments":{"externalIP":"10.0.0.1","port":2021,"protocol":"tcp","mode":4,"oper":1},
			  "endpoints":[{"endpointIP":"10.0.0.9","targetPort":8000,"weight":1}]}`,
		},
		{
			"detach_endpoints",
			[]string{"10.0.0.1", "--tcp=2021:8000", "--detachEP", "--endpoints=10.0.0.9:1"},
			`{"serviceArguments":{"externalIP":"10.0.0.1","port":2021,"protocol":"tcp","mode":4,"oper":2},
			  "endpoints":[{"endpointIP":"10.0.0.9","targetPort":8000,"weight":1}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, nil, "", append([]string{"create", "lb", "--dry-run"}, tt.give...)...)
			if r.code != exitOK {
				t.Fatalf("exit %d; want 0\nstderr: %s", r.code, r.stderr)
			}
			if !sameRule(t, r.stdout, tt.want) {
				t.Errorf("got %s;\nwant %s", compactJSON(t, r.stdout), compactJSON(t, tt.want))
			}
		})
	}
}

func TestCreate_SeedExamplesAreValidRules(t *testing.T) {
	for _, give := range [][]string{seedPDFlags, seedCHWBLFlags} {
		r := runCLI(t, nil, "", append([]string{"create", "lb", "--dry-run"}, give...)...)
		if r.code != exitOK {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if err := rule.Validate(decodeEntry(t, r.stdout)); err != nil {
			t.Errorf("llbd would refuse %s: %v", compactJSON(t, r.stdout), err)
		}
	}
}

func TestCreate_BadCommandLinesAreUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want []string // substrings of stderr
	}{
		{"no_external_ip", []string{"--tcp=80:80", "--endpoints=10.0.0.2:1"}, []string{"needs an externalIP argument, or -f FILE"}},
		{"external_ip_not_an_ip", []string{"lb.example", "--tcp=80:80", "--endpoints=10.0.0.2:1"}, []string{`externalIP "lb.example" is not an IP address`}},
		{"no_port", []string{"10.0.0.1", "--endpoints=10.0.0.2:1"}, []string{"give the service port: --tcp"}},
		{"two_protocols", []string{"10.0.0.1", "--tcp=80:80", "--udp=80:80", "--endpoints=10.0.0.2:1"}, []string{"give one of --tcp, --udp"}},
		{"no_endpoints", []string{"10.0.0.1", "--tcp=80:80"}, []string{"give the endpoints"}},
		{"endpoint_without_port", []string{"10.0.0.1", "--tcp=80", "--endpoints=10.0.0.2:1"}, []string{`endpoint "10.0.0.2:1" has no port`}},
		{"weight_out_of_range", []string{"10.0.0.1", "--tcp=80:80", "--endpoints=10.0.0.2:256"}, []string{"weight: 256 is outside 0–255"}},
		{"unknown_role", []string{"10.0.0.1", "--tcp=80:80", "--endpoints=10.0.0.2:8100:1:prefil"}, []string{`endpoint "10.0.0.2:8100:1:prefil"`, `"prefil" is neither a number nor a role`}},
		{"role_list_length", []string{"10.0.0.1", "--tcp=80:80", "--endpoints=10.0.0.2:1,10.0.0.3:1", "--ep-role=prefill"}, []string{"--ep-role has 1 values for 2 endpoints"}},
		{"role_conflict", []string{"10.0.0.1", "--tcp=80:80", "--endpoints=10.0.0.2:1:prefill", "--ep-role=decode"}, []string{"its role differs from --ep-role"}},
		{"unknown_selector", []string{"10.0.0.1", "--tcp=80:80", "--select=fastest", "--endpoints=10.0.0.2:1"}, []string{`--select "fastest": want one of rr|hash|priority`}},
		{"unknown_mode", []string{"10.0.0.1", "--tcp=80:80", "--mode=l7", "--endpoints=10.0.0.2:1"}, []string{`--mode "l7": want one of default|onearm`}},
		{"attach_and_detach", []string{"10.0.0.1", "--tcp=80:80", "--attachEP", "--detachEP", "--endpoints=10.0.0.2:1"}, []string{"--attachEP or --detachEP, not both"}},
		{"target_port_range", []string{"10.0.0.1", "--tcp=80:8000-8001", "--endpoints=10.0.0.2:1"}, []string{"a target port range is not supported"}},
		{"every_problem_at_once", []string{"10.0.0.x", "--tcp=0:80", "--select=x", "--endpoints=10.0.0.2:1"},
			[]string{"externalIP", "port: 0 is outside 1–65535", `--select "x"`}},
		{"file_with_flags", []string{"-f", "rule.json", "--tcp=80:80"}, []string{"-f posts the file as-is; drop --tcp"}},
		{"file_with_external_ip", []string{"10.0.0.1", "-f", "rule.json"}, []string{"-f posts the file as-is; drop the externalIP argument"}},
		{"missing_file", []string{"-f", "/nonexistent/rule.json"}, []string{"-f: open /nonexistent/rule.json"}},
		{"dry_run_of_a_file_that_is_not_json", []string{"-f", "-"}, []string{"-f -: the file is not valid JSON"}},
		{"unknown_flag", []string{"10.0.0.1", "--tcp=80:80", "--pd-disag"}, []string{"unknown flag: --pd-disag"}},
		{"flag_type", []string{"10.0.0.1", "--tcp=80:80", "--kv-exact-mode=one", "--endpoints=10.0.0.2:1"}, []string{"--kv-exact-mode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, nil, "", append([]string{"create", "lb", "--dry-run"}, tt.give...)...)
			if r.code != exitUsage {
				t.Fatalf("exit %d; want %d\nstdout: %s\nstderr: %s", r.code, exitUsage, r.stdout, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q; want nothing on a usage error", r.stdout)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q; want it to contain %q", r.stderr, w)
				}
			}
		})
	}
}
