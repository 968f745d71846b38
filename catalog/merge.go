package catalog

import (
	"fmt"
	"slices"

	"github.com/llbproject/llb/rule"
)

// LoxiLB's merge of a write into a stored rule (§1.7): which endpoints keep
// their slots, what attach and detach do, which omitted fields keep their
// stored values, and which fields a replace may not change.

// keepOrder is LoxiLB's replace of the endpoint list: stored endpoints that
// stay keep their positions (their stable indexes), taking the new attributes;
// new ones are appended in request order; the rest are dropped. Endpoints
// are matched by ip:port, duplicates pairwise in order.
func keepOrder(stored, req []rule.Endpoint) ([]rule.Endpoint, []string) {
	used := make([]bool, len(req))
	var out []rule.Endpoint
	kept, dropped := 0, 0
	for i := range stored {
		j := -1
		for k := range req {
			if !used[k] && req[k].Identity() == stored[i].Identity() {
				j = k
				break
			}
		}
		if j < 0 {
			dropped++
			continue
		}
		used[j] = true
		out = append(out, req[j])
		kept++
	}
	added := 0
	for k := range req {
		if !used[k] {
			out = append(out, req[k])
			added++
		}
	}
	return out, []string{fmt.Sprintf("endpoint order kept: %d kept in place, %d appended, %d dropped", kept, added, dropped)}
}

// attach adds req's endpoints to stored, updating in place an endpoint with
// the same ip:port.
func attach(stored, req []rule.Endpoint) ([]rule.Endpoint, []string) {
	out := slices.Clone(stored)
	updated, added := 0, 0
	for _, ep := range req {
		i := slices.IndexFunc(out, func(s rule.Endpoint) bool { return s.Identity() == ep.Identity() })
		if i >= 0 {
			out[i] = ep
			updated++
			continue
		}
		out = append(out, ep)
		added++
	}
	return out, []string{fmt.Sprintf("attach: %d updated in place, %d appended", updated, added)}
}

// detach removes one stored endpoint per requested ip:port, or fails with
// ErrNoEndpoint naming every requested endpoint the rule lacks.
func detach(stored, req []rule.Endpoint, k rule.RuleKey) ([]rule.Endpoint, []string, error) {
	out := slices.Clone(stored)
	var missing []string
	for _, ep := range req {
		i := slices.IndexFunc(out, func(s rule.Endpoint) bool { return s.Identity() == ep.Identity() })
		if i < 0 {
			missing = append(missing, ep.Identity())
			continue
		}
		out = slices.Delete(out, i, i+1)
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("%w: rule %s has no endpoint %v to detach", ErrNoEndpoint, k, missing)
	}
	return out, []string{fmt.Sprintf("detach: %d removed", len(req))}, nil
}

// keepAdmission gives every fc_* field the request omitted its stored value.
func keepAdmission(dst, stored *rule.ServiceArguments) []string {
	var trace []string
	keepInt := func(name string, d **int64, s *int64) {
		if *d == nil && s != nil {
			*d = new(*s)
			trace = append(trace, "kept "+name+" from the stored rule")
		}
	}
	keepStr := func(name string, d **string, s *string) {
		if *d == nil && s != nil {
			*d = new(*s)
			trace = append(trace, "kept "+name+" from the stored rule")
		}
	}
	a, s := &dst.AdmissionArguments, &stored.AdmissionArguments
	keepStr("fc_mode", &a.FCMode, s.FCMode)
	keepInt("fc_max_outstanding", &a.FCMaxOutstanding, s.FCMaxOutstanding)
	keepInt("fc_ep_max_inflight", &a.FCEpMaxInflight, s.FCEpMaxInflight)
	keepInt("fc_prefill_max_inflight", &a.FCPrefillMaxInflight, s.FCPrefillMaxInflight)
	keepInt("fc_decode_max_inflight", &a.FCDecodeMaxInflight, s.FCDecodeMaxInflight)
	keepInt("fc_max_queue_depth", &a.FCMaxQueueDepth, s.FCMaxQueueDepth)
	keepInt("fc_max_queue_wait_ms", &a.FCMaxQueueWaitMs, s.FCMaxQueueWaitMs)
	keepInt("fc_telemetry_stale_ms", &a.FCTelemetryStaleMs, s.FCTelemetryStaleMs)
	keepStr("fc_adaptive", &a.FCAdaptive, s.FCAdaptive)
	keepInt("fc_warmup_ms", &a.FCWarmupMs, s.FCWarmupMs)
	keepInt("fc_ttft_target_ms", &a.FCTTFTTargetMs, s.FCTTFTTargetMs)
	keepInt("fc_tenant_max_share_pct", &a.FCTenantMaxSharePct, s.FCTenantMaxSharePct)
	keepStr("fc_expose_headers", &a.FCExposeHeaders, s.FCExposeHeaders)
	return trace
}

// immutableChanges lists the fields a replace may not change (409).
func immutableChanges(old, nw *rule.Rule) []rule.Problem {
	o, n := old.Entry.ServiceArguments, nw.Entry.ServiceArguments
	var ps []rule.Problem
	if rule.EngineOf(o) != rule.EngineOf(n) {
		ps = append(ps, rule.ConflictProblem(rule.SAField("kvEngineType"), "lbrule-exist error: cant modify rule kv engine type (stored %q, got %q); delete and recreate the rule", rule.EngineOf(o), rule.EngineOf(n)))
	}
	if (o.Mode == rule.ModeFullProxy) != (n.Mode == rule.ModeFullProxy) {
		ps = append(ps, rule.ConflictProblem(rule.SAField("mode"), "lbrule-exist error: cant modify rule fullproxy mode (stored mode %d, got mode %d); delete and recreate the rule", o.Mode, n.Mode))
	}
	if o.Security != n.Security {
		ps = append(ps, rule.ConflictProblem(rule.SAField("security"), "lbrule-exist error: cant modify rule security (stored %d, got %d)", o.Security, n.Security))
	}
	if o.Egress != n.Egress {
		ps = append(ps, rule.ConflictProblem(rule.SAField("egress"), "lbrule-exist error: cant modify rule egress (stored %t, got %t)", o.Egress, n.Egress))
	}
	if !slices.Equal(old.Entry.SecondaryIPs, nw.Entry.SecondaryIPs) {
		ps = append(ps, rule.ConflictProblem("secondaryIPs", "lbrule-exist error: cant modify rule secondary IPs (secIP modify error)"))
	}
	return ps
}
