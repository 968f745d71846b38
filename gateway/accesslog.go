package gateway

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/ladder"
)

// HeaderRoute is the response header that tells operators how a request was
// routed: the decision (tier, endpoints by index, the fall-through reasons,
// flags), then the endpoint addresses, the retry count, and for a KV-exact
// rule the cached tokens llb predicted for the answering endpoint and, when
// known before the headers went out (a P/D prefill leg, a buffered JSON
// answer), the cached tokens its engine reported, e.g.
//
//	tier=1.5 prefill=0 decode=2 via=session_miss,trie_miss prefill_addr=10.0.0.1:8100 decode_addr=10.0.0.3:8200 retries=0 kv_predicted=96 kv_cached=96
//
// Responses llb answers without a decision carry "tier=none error=<code>";
// an error llb answers after a decision adds " error=<code>" to it (the
// decision of the attempt that failed, when a retry found nothing better).
const HeaderRoute = "X-Llb-Route"

// StatusClientGone is the status logged and counted when the client left
// before an answer (nginx's and Caddy's 499; never sent).
const StatusClientGone = 499

// setRouteHeader sets X-Llb-Route on the response header.
func (x *exchange) setRouteHeader(h *fasthttp.ResponseHeader, addrs []string) {
	var buf [320]byte
	h.SetBytesV(HeaderRoute, x.appendRoute(buf[:0], addrs))
}

func (x *exchange) appendRoute(b []byte, addrs []string) []byte {
	if !x.decided {
		b = append(b, "tier=none"...)
		if x.code != "" {
			b = append(b, " error="...)
			b = append(b, x.code...)
		}
		return x.appendTenancy(b)
	}
	b = x.decision.AppendText(b)
	if x.prefillEP >= 0 && x.prefillEP < len(addrs) {
		b = append(b, " prefill_addr="...)
		b = append(b, addrs[x.prefillEP]...)
	}
	if x.decodeEP >= 0 && x.decodeEP < len(addrs) {
		b = append(b, " decode_addr="...)
		b = append(b, addrs[x.decodeEP]...)
	}
	if x.h.pdEngine != "" {
		b = append(b, " engine="...)
		b = append(b, x.h.pdEngine...)
	}
	b = append(b, " retries="...)
	b = strconv.AppendInt(b, int64(x.retries), 10)
	if x.code != "" {
		b = append(b, " error="...)
		b = append(b, x.code...)
	}
	b = x.appendTenancy(b)
	return x.appendTruth(b)
}

// appendTruth adds the predicted and, once the engine reported them, the
// actual cached tokens: " kv_predicted=96 kv_cached=80".
func (x *exchange) appendTruth(b []byte) []byte {
	if x.pred.OK {
		b = append(b, " kv_predicted="...)
		b = strconv.AppendUint(b, uint64(x.pred.CachedTokens), 10)
	}
	if x.cached.Reported {
		b = append(b, " kv_cached="...)
		b = strconv.AppendUint(b, uint64(x.cached.CachedTokens), 10)
	}
	return b
}

// record writes the access-log line and the per-request metrics.
func (h *Handler) record(x *exchange) {
	dur := time.Since(x.start)
	h.bytesOut.Add(x.bytes)
	m := h.met
	m.status(x.status)
	if x.api == "completion" || x.api == "chat" {
		m.aiDuration.Update(seconds(dur))
	}
	if x.generation {
		h.recordTenant(x)
	}
	h.chargeKey(x)
	if x.ttft > 0 {
		m.ttfb.Update(seconds(x.ttft))
	}
	if x.pd {
		m.pdRequests.Inc()
	}
	e := h.log.Debug()
	if h.opts.AccessLog {
		e = h.log.Info()
	}
	if !e.Enabled() {
		return
	}
	var buf [320]byte
	e.Bytes(logfield.Method, x.in.Header.Method()).
		Bytes(logfield.Path, x.in.URI().PathOriginal()).
		Str(logfield.Remote, x.remote).
		Str(logfield.API, x.api).
		Int(logfield.Status, x.status).
		Int64(logfield.Bytes, x.bytes).
		Dur(logfield.Duration, dur)
	if x.model != "" {
		e.Str(logfield.Model, x.model).Bool(logfield.Stream, x.wantStream)
	}
	if x.decided {
		e.Str(logfield.Tier, x.decision.Tier.String()).
			Bytes(logfield.LLBRoute, x.appendRoute(buf[:0], h.addrs)).
			Int(logfield.Retries, x.retries)
		if x.prefillEP >= 0 {
			e.Str(logfield.PrefillAddr, h.addrs[x.prefillEP])
		}
		if x.decodeEP >= 0 {
			e.Str(logfield.DecodeAddr, h.addrs[x.decodeEP])
		}
	}
	if x.ttfb > 0 {
		e.Dur(logfield.TTFB, x.ttfb)
	}
	if x.ttft > 0 {
		e.Dur(logfield.TTFT, x.ttft)
	}
	if x.pd {
		e.Dur(logfield.PrefillDuration, x.prefill)
		if h.pdEngine != "" {
			e.Str(logfield.Engine, h.pdEngine)
		}
		if _, dual := h.pd.(sglang); !dual { // a bootstrap room passes no params
			e.Str(logfield.KVParams, x.kvOut.String())
		}
	}
	if x.kvGuard != ladder.ReasonNone {
		e.Str(logfield.KVGuard, x.kvGuard.String())
	}
	if x.pred.OK {
		e.Uint32(logfield.KVPredicted, x.pred.CachedTokens)
	}
	if x.decided && x.decision.TTFT.OK {
		in := x.decision.TTFT.Input
		b := strconv.AppendUint(buf[:0], uint64(in.Uncached), 10)
		b = strconv.AppendUint(append(b, '/'), uint64(in.Queued), 10)
		b = strconv.AppendUint(append(b, '/'), uint64(in.Running), 10)
		b = strconv.AppendUint(append(b, '/'), uint64(in.Waiting), 10)
		b = strconv.AppendUint(append(b, '/'), uint64(in.Lacking()), 10)
		e.Dur(logfield.TTFTPredicted, x.decision.TTFT.Predicted).Bytes(logfield.TTFTInput, b)
	}
	if x.objective > 0 {
		e.Dur(logfield.TTFTObjective, x.objective)
	}
	if x.cached.Reported {
		e.Uint32(logfield.KVCached, x.cached.CachedTokens)
	}
	if x.parked > 0 {
		e.Dur(logfield.Parked, x.parked)
	}
	if x.mig.count > 0 {
		e.Int(logfield.Migrations, x.mig.count)
	}
	if x.mig.cut != "" {
		e.Str(logfield.MigrationCut, x.mig.cut)
	}
	if x.code != "" {
		e.Str(logfield.Code, x.code)
	}
	if x.failure != actors.FailNone {
		e.Str(logfield.Failure, x.failure.String())
	}
	if x.detail != "" {
		e.Str(logfield.Error, x.detail)
	}
	if x.aborted {
		e.Bool(logfield.Aborted, true)
	}
	if x.requestID != "" {
		e.Str(logfield.RequestID, x.requestID)
	}
	e.Msg("request")
}
