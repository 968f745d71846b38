package des

import (
	"math"
	"time"

	"github.com/llbproject/llb/ladder"
)

// result turns a finished run's state into its Result.
func (s *sim) result() *Result {
	cfg := &s.cfg
	n := len(s.workers)
	slo := cfg.slo()
	res := &Result{
		Trace: s.tr.Config.Name, Strategy: cfg.Strategy.Name, Mode: cfg.Strategy.Mode(),
		Seed: s.tr.Config.Seed, Workers: n, Rate: cfg.Rate, Concurrency: cfg.Concurrency,
		Requests: len(s.reqs) - cfg.Warmup, Warmup: cfg.Warmup,
		TTFTSLO:       slo.Seconds(),
		OracleHitRate: s.tr.OracleHitRate(cfg.Warmup),
		TierMix:       map[string]int{},
		PerWorker:     make([]WorkerResult, n),
		Events:        s.events,
	}
	if cfg.Concurrency > 0 {
		res.Rate = 0
	}
	if cfg.Strategy.KVExact {
		env := cfg.Strategy.Env()
		res.FactorPct, res.Lambda = env.MeanLoadFactorPct, env.LoadPenalty
	}

	var end time.Duration
	for i := range s.reqs {
		end = max(end, s.reqs[i].end)
	}
	res.Makespan = end - s.reqs[0].arrive

	ttft := make([]float64, 0, res.Requests)
	e2e := make([]float64, 0, res.Requests)
	wait := make([]float64, 0, res.Requests)
	perTTFT := make([][]float64, n)
	perCached := make([]int64, n)
	perPrompt := make([]int64, n)
	var cached, prompt, outTokens int64
	var good int
	var predErr, predSigned []float64
	var sumFactor, sumLambda, sumLoad float64
	start, last := s.reqs[cfg.Warmup].arrive, time.Duration(0)
	for i := cfg.Warmup; i < len(s.reqs); i++ {
		r := &s.reqs[i]
		tr := &s.tr.Requests[i]
		f := (r.first - r.arrive).Seconds()
		ttft = append(ttft, f)
		e2e = append(e2e, (r.end - r.arrive).Seconds())
		wait = append(wait, (r.admit - r.arrive).Seconds())
		if r.first-r.arrive <= slo {
			good++
		}
		if r.ttft.OK {
			e := ladder.TTFTRelError(r.ttft.Predicted, r.first-r.arrive)
			predErr, predSigned = append(predErr, math.Abs(e)), append(predSigned, e)
		}
		last = max(last, r.end)
		w := int(r.worker)
		perTTFT[w] = append(perTTFT[w], f)
		perCached[w] += int64(r.cached)
		perPrompt[w] += int64(tr.PromptTokens)
		cached += int64(r.cached)
		prompt += int64(tr.PromptTokens)
		outTokens += int64(tr.OutputTokens)

		if cfg.Strategy.IsPeer() {
			res.TierMix["peer:"+string(cfg.Strategy.Peer)]++
		} else {
			res.TierMix[tierKey(r.tier, cfg.Strategy.Selector)]++
		}
		countFlag(&res.Spills, r.flags, ladder.FlagSpill)
		countFlag(&res.Reliefs, r.flags, ladder.FlagRelief)
		countFlag(&res.ColdSeeds, r.flags, ladder.FlagColdSeed)
		countFlag(&res.Saturated, r.flags, ladder.FlagSaturated)
		countFlag(&res.BoundWalks, r.flags, ladder.FlagBoundWalk)
		if r.kv.Ran {
			res.KVDecisions++
			sumFactor += float64(r.kv.FactorPct)
			sumLambda += float64(r.kv.Lambda)
			sumLoad += float64(r.kv.Load)
		}
	}
	res.TTFT, res.E2E, res.QueueWait = summarize(ttft), summarize(e2e), summarize(wait)
	res.TTFTPredError, res.TTFTPredBias = summarize(predErr), summarize(predSigned).P50
	if res.Requests > 0 {
		res.SLOKept = float64(good) / float64(res.Requests)
	}
	if window := (last - start).Seconds(); window > 0 {
		res.Throughput = float64(res.Requests) / window
		res.TokensPerSec = float64(outTokens) / window
		res.Goodput = float64(good) / window
	}
	if prompt > 0 {
		res.HitRate = float64(cached) / float64(prompt)
	}
	if res.KVDecisions > 0 {
		k := float64(res.KVDecisions)
		res.MeanFactorPct, res.MeanLambda, res.MeanKVLoad = sumFactor/k, sumLambda/k, sumLoad/k
	}

	span := float64(res.Makespan)
	var sumActive, maxActive float64
	var sumServed, maxServed int
	for i := range s.workers {
		w := &s.workers[i]
		s.setActive(w, end, w.active) // close the integral at the end
		pw := &res.PerWorker[i]
		pw.Requests = len(perTTFT[i])
		pw.TTFT = summarize(perTTFT[i])
		if perPrompt[i] > 0 {
			pw.HitRate = float64(perCached[i]) / float64(perPrompt[i])
		}
		if span > 0 {
			pw.MeanActive = w.activeArea / span
		}
		pw.MaxRunning, pw.MaxWaiting = w.maxRunning, w.maxWaiting
		st := w.mirror.Stats()
		res.MirrorVerified += st.Contract.Verified
		res.MirrorBlocks += st.Blocks

		sumActive += pw.MeanActive
		sumServed += pw.Requests
		if pw.MeanActive > maxActive {
			maxActive, res.Hottest = pw.MeanActive, i
		}
		maxServed = max(maxServed, pw.Requests)
	}
	if sumActive > 0 {
		res.LoadSkew = maxActive / (sumActive / float64(n))
	}
	if sumServed > 0 {
		res.ServedSkew = float64(maxServed) / (float64(sumServed) / float64(n))
	}
	res.HottestTTFTP90 = res.PerWorker[res.Hottest].TTFT.P90
	if cfg.RecordRoutes {
		res.Routes = make([]Route, len(s.reqs))
		for i := range s.reqs {
			r := &s.reqs[i]
			res.Routes[i] = Route{
				Seq: i, Worker: int(r.worker), Decision: r.route, Tier: r.tier, Flags: r.flags,
				Overlap: r.overlap, CachedTokens: int(r.cached), TTFT: r.first - r.arrive, E2E: r.end - r.arrive,
				Queue: r.admit - r.arrive, Arrive: r.arrive,
			}
		}
	}
	return res
}

// tierKey names the deciding stage for TierMix.
func tierKey(t ladder.Tier, sel ladder.SelectorKind) string {
	if t == ladder.TierSelector {
		return "sel:" + sel.String()
	}
	return t.String()
}

func countFlag(n *int, f, flag ladder.Flags) {
	if f.Has(flag) {
		*n++
	}
}
