package ladder

import (
	"errors"
	"strings"
	"testing"
)

func pdEndpoints() []EndpointSpec {
	return []EndpointSpec{{Role: RolePrefill}, {Role: RolePrefill}, {Role: RoleDecode}}
}

func TestValidateRule_AcceptsWellFormedRules(t *testing.T) {
	tests := []struct {
		name string
		svc  ServiceSpec
		eps  []EndpointSpec
	}{
		{"pd kv1 cache aware", ServiceSpec{PDDisagg: true, CacheAware: true, KVExactMode: KVPrefill, KVBlockSize: 16, CacheThresholdPct: 20, BalanceAbsThreshold: 3}, pdEndpoints()},
		{"single pool chwbl", ServiceSpec{Selector: SelCHWBL}, []EndpointSpec{{}, {}}},
		{"single pool kv3", ServiceSpec{Selector: SelRR, KVExactMode: KVSinglePool, KVBlockSize: 16}, []EndpointSpec{{}, {Backup: true}}},
		{"pd gpuaware", ServiceSpec{PDDisagg: true, Selector: SelGPUAware}, pdEndpoints()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ValidateRule(&tt.svc, tt.eps); err != nil {
				t.Fatalf("ValidateRule = %v; want nil", err)
			}
		})
	}
}

func TestValidateRule_RejectsWithFieldNames(t *testing.T) {
	tests := []struct {
		name      string
		svc       ServiceSpec
		eps       []EndpointSpec
		wantField string
	}{
		{"sel out of range", ServiceSpec{Selector: 11}, []EndpointSpec{{}}, "sel"},
		{"sel l4 only", ServiceSpec{Selector: SelN3}, []EndpointSpec{{}}, "sel"},
		{"kv1 without pd", ServiceSpec{KVExactMode: KVPrefill}, []EndpointSpec{{}}, "kvExactMode"},
		{"kv3 with pd", ServiceSpec{PDDisagg: true, KVExactMode: KVSinglePool}, pdEndpoints(), "kvExactMode"},
		{"kv2 reserved", ServiceSpec{KVExactMode: KVNATS}, []EndpointSpec{{}}, "kvExactMode"},
		{"kv4", ServiceSpec{KVExactMode: 4}, []EndpointSpec{{}}, "kvExactMode"},
		{"cache aware without pd", ServiceSpec{CacheAware: true}, []EndpointSpec{{}}, "pd_cache_aware_mode"},
		{"threshold 101", ServiceSpec{CacheThresholdPct: 101}, []EndpointSpec{{}}, "pd_cache_threshold"},
		{"balance 256", ServiceSpec{BalanceAbsThreshold: 256}, []EndpointSpec{{}}, "pd_balance_abs_threshold"},
		{"ttl negative", ServiceSpec{SessionTTL: -1}, []EndpointSpec{{}}, "pd_session_ttl_sec"},
		{"block size negative", ServiceSpec{KVBlockSize: -1}, []EndpointSpec{{}}, "kvBlockSize"},
		{"queue depth 65", ServiceSpec{Admission: AdmissionSpec{QueueDepthPerEP: 65}}, []EndpointSpec{{}}, "admission.queue_depth_per_ep"},
		{"no endpoints", ServiceSpec{}, nil, "endpoints"},
		{"33 endpoints", ServiceSpec{}, make([]EndpointSpec, 33), "endpoints"},
		{"pd without decode", ServiceSpec{PDDisagg: true}, []EndpointSpec{{Role: RolePrefill}}, "endpoints"},
		{"role 3", ServiceSpec{PDDisagg: true}, append(pdEndpoints(), EndpointSpec{Role: 3}), "endpoints[3].ep_role"},
		{"role on single pool", ServiceSpec{}, []EndpointSpec{{Role: RolePrefill}}, "endpoints[0].ep_role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateRule(&tt.svc, tt.eps)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("err = %v; want ErrInvalidSpec", err)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tt.wantField+":") {
				t.Fatalf("err = %v; want a FieldError for %q", err, tt.wantField)
			}
		})
	}
}

func TestValidateRule_ReportsAllProblemsAtOnce(t *testing.T) {
	svc := ServiceSpec{Selector: 42, CacheThresholdPct: -5, KVExactMode: KVNATS}
	err := ValidateRule(&svc, nil)
	for _, f := range []string{"sel", "pd_cache_threshold", "kvExactMode", "endpoints"} {
		if err == nil || !strings.Contains(err.Error(), f+":") {
			t.Errorf("err = %v; want it to name %s", err, f)
		}
	}
}

func TestNewRouter_WrapsValidationErrors(t *testing.T) {
	env := DefaultEnv()
	env.MeanLoadFactorPct = 1
	_, err := NewRouter(ServiceSpec{Name: "svc", Selector: 12}, []EndpointSpec{{}}, env, RouterConfig{})
	if !errors.Is(err, ErrInvalidSpec) || !errors.Is(err, ErrInvalidEnv) || !strings.Contains(err.Error(), `"svc"`) {
		t.Fatalf("err = %v; want both classes and the rule name", err)
	}
}
