package rule

// AdmissionArguments are the admission ("flow control") fc_* keys of the
// inference gateway's development contract (loxilb-compat.md §1.3). They need
// mode 4.
//
// Every field is a pointer with replace semantics of their own: on a replace
// (oper 0) an omitted field keeps the stored value, 0 or "inherit" resets it to
// the daemon/env default, and an explicit null is refused (422). Each carries
// the `llb:"nonull"` tag that DecodeEntry enforces.
type AdmissionArguments struct {
	// FCMode is off, observe, enforce or inherit.
	FCMode *string `json:"fc_mode,omitempty" llb:"nonull"`
	// FCMaxOutstanding caps total in-flight requests of the rule, 0–100000 (0 = inherit).
	FCMaxOutstanding *int64 `json:"fc_max_outstanding,omitempty" llb:"nonull"`
	// FCEpMaxInflight caps in-flight requests per endpoint, 0–100000 (0 = inherit).
	FCEpMaxInflight *int64 `json:"fc_ep_max_inflight,omitempty" llb:"nonull"`
	// FCPrefillMaxInflight caps in-flight requests per prefill endpoint, 0–100000 (0 = inherit).
	FCPrefillMaxInflight *int64 `json:"fc_prefill_max_inflight,omitempty" llb:"nonull"`
	// FCDecodeMaxInflight caps in-flight requests per decode endpoint, 0–100000 (0 = inherit).
	FCDecodeMaxInflight *int64 `json:"fc_decode_max_inflight,omitempty" llb:"nonull"`
	// FCMaxQueueDepth bounds parked requests, 0–65536 (0 = inherit); when set
	// without FCMaxQueueWaitMs the wait defaults to 5000 ms.
	FCMaxQueueDepth *int64 `json:"fc_max_queue_depth,omitempty" llb:"nonull"`
	// FCMaxQueueWaitMs bounds a parked request's wait in milliseconds, 0–3600000.
	FCMaxQueueWaitMs *int64 `json:"fc_max_queue_wait_ms,omitempty" llb:"nonull"`
	// FCTelemetryStaleMs is when endpoint telemetry counts as stale, in
	// milliseconds, 0–3600000 (0 → 30000).
	FCTelemetryStaleMs *int64 `json:"fc_telemetry_stale_ms,omitempty" llb:"nonull"`
	// FCAdaptive is on, off or inherit.
	FCAdaptive *string `json:"fc_adaptive,omitempty" llb:"nonull"`
	// FCWarmupMs is the adaptive controller's warm-up in milliseconds, 0–3600000.
	FCWarmupMs *int64 `json:"fc_warmup_ms,omitempty" llb:"nonull"`
	// FCTTFTTargetMs is the adaptive controller's TTFT target in milliseconds, 0–3600000.
	FCTTFTTargetMs *int64 `json:"fc_ttft_target_ms,omitempty" llb:"nonull"`
	// FCTenantMaxSharePct caps one tenant's share of capacity, 0–100 (0 = inherit).
	FCTenantMaxSharePct *int64 `json:"fc_tenant_max_share_pct,omitempty" llb:"nonull"`
	// FCExposeHeaders is on, off or inherit (X-Loxilb-Admission-* headers).
	FCExposeHeaders *string `json:"fc_expose_headers,omitempty" llb:"nonull"`
}
