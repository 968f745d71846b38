package ladder

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// The golden scenarios under testdata/scenarios/ drive a Router through a small
// command language; `go test ./ladder -run TestGolden -rewrite` regenerates
// the expected output, which is reviewed as a diff.
//
//	env                      KEY=VALUE lines; prints the parsed knobs
//	rule [pd] [cache-aware] [kv=N] [sel=N] [block=N] [threshold=N]
//	     [balance=N] [ttl=N] [warmup=N] [start=N] [inflight=N] [depth=N]
//	     [park=N] [total=N]
//	                         one endpoint per input line:
//	                         role=prefill|decode|none [w=N] [backup] [addr=A]
//	view                     replaces every view; input lines
//	                         "<ep> conns=N queued=N swap=N cap=N inv=N
//	                         overlap=N offloaded=N parked=N kvused=N prefillq=N
//	                         weight=N ctrl=S down cb drain distrust"
//	set                      same line format, updates only the named fields
//	decide [key=K] [pin=P,D] [blocks=N] [tokens=N] [guard=R] [now=N]
//	       [prefix=H] [conv=H] [client=H] [ckey=K] [total=N] [repeat=N]
//	       [load] [pinned] [class=C] [objective=MS]
//	                         the input, if any, is the prompt; load adds each
//	                         admitted decision to the chosen endpoints'
//	                         conns; pinned feeds back PinSession/EvictSession
//	resume ep=N [key=K] [pin=P,D]
//	learn ep=N               input is the prompt; teaches the Tier-1 trie
//	ttft ep=N actual=MS [u=N] [q=N] [n=N] [repeat=N]
//	                         the endpoint's TTFT model learns a measured TTFT
//	                         (Router.ObserveTTFT) for that input
//	remove ep=N              Router.RemoveEndpoint
//	law mode=M [factor=N] [lambda=N] [blocks=N]
//	                         input lines "<ep> overlap=N load=N cap=N [room=N]";
//	                         prints the worked cap_i / cost_i and the pick
//	adaptive loads=(L, ...)  prints ε(L) and λ(L)
//	sessions [cap=N] [shards=N]
//	                         a session table with the rule's TTL (0 → 300 s)
//	sput key=K pin=P,D now=N / sget key=K now=N / sevict-ep ep=N / ssweep now=N
//	sessionkey [user=U] [conv=C]   SessionKeyFor
//	decide ... [class=C] [parked=(c, s, h)]
//	                         the request's class; the snapshot's parked
//	                         requests by class (critical, standard, sheddable)
//	fpark id=N [class=C] [tenant=T] [allowed=(e, ...)]
//	                         FlowQueue.Park (allowed: every endpoint when absent)
//	fnext ep=N / fpeek ep=N  FlowQueue.Next / Peek
//	fremove id=N / fvictim class=C
//	fadmit|fdone [class=C] [tenant=T] tokens=N
//	                         FlowQueue.Admitted / Done
//	fstate                   every class's tenants: counter, in flight, parked ids

var goldenEpoch = time.Unix(1_000_000, 0)

type goldenState struct {
	flow    *FlowQueue
	flowLog map[string]bool // tenants seen, for fstate
	table   *SessionTable
	env     Env
	svc     ServiceSpec
	eps     []EndpointSpec
	views   []EndpointView
	router  *Router
	session map[string]Pin
}

func TestGolden(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		st := &goldenState{env: DefaultEnv(), session: map[string]Pin{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return st.run(t, d)
		})
	})
}

func (st *goldenState) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "env":
		m := map[string]string{}
		for _, line := range nonEmptyLines(d.Input) {
			k, v, _ := strings.Cut(line, "=")
			m[strings.TrimSpace(k)] = v
		}
		env, warns, err := ParseEnv(envFrom(m))
		var b strings.Builder
		for _, w := range warns {
			fmt.Fprintf(&b, "warning: %s\n", w)
		}
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
			return b.String()
		}
		st.env = env
		fmt.Fprintf(&b, "mode=%s factor=%d lambda=%d headroom=%d max_seqs=%d relief=%s seed_n=%d cold_min=%d min_match=%d inflight=%d depth=%d park=%s total=%d origin_err=%d\n",
			env.LBMode, env.MeanLoadFactorPct, env.LoadPenalty, env.HeadroomPct, env.MaxNumSeqs, env.SpillRelief, env.ColdStartSeedN, env.ColdStartMinBlocks,
			env.MinMatchTokens, env.MaxInflightPerEP, env.QueueDepthPerEP, env.MaxPark, env.MaxTotalInflight, env.OriginErrThreshold)
		if def := DefaultEnv(); env.OffloadWeightPct != def.OffloadWeightPct || env.PredictionDemote != def.PredictionDemote {
			fmt.Fprintf(&b, "offload_weight=%d prediction_demote=%v\n", env.OffloadWeightPct, env.PredictionDemote)
		}
		if env.MissSettle != DefaultEnv().MissSettle {
			fmt.Fprintf(&b, "miss_settle=%v\n", env.MissSettle)
		}
		return b.String() + st.rebuild()
	case "rule":
		st.svc = ServiceSpec{Name: "golden"}
		st.svc.PDDisagg = d.HasArg("pd")
		st.svc.CacheAware = d.HasArg("cache-aware")
		st.svc.KVExactMode = KVExactMode(intArg(t, d, "kv", 0))
		st.svc.Selector = SelectorKind(intArg(t, d, "sel", 0))
		// An argument left out takes the value rule.Compile gives a rule
		// that leaves the field unset (LoxiLB's defaults).
		st.svc.KVBlockSize = intArg(t, d, "block", 16)
		st.svc.CacheThresholdPct = intArg(t, d, "threshold", 20)
		st.svc.BalanceAbsThreshold = intArg(t, d, "balance", 3)
		st.svc.SessionTTL = time.Duration(intArg(t, d, "ttl", 300)) * time.Second
		st.svc.PersistTTL = 10800 * time.Second
		st.svc.KVWarmup = time.Duration(intArg(t, d, "warmup", 0)) * time.Second
		if d.HasArg("start") {
			st.svc.StartedAt = goldenEpoch.Add(time.Duration(intArg(t, d, "start", 0)) * time.Second)
		}
		st.svc.Admission = AdmissionSpec{
			MaxInflightPerEP: intArg(t, d, "inflight", 0),
			QueueDepthPerEP:  intArg(t, d, "depth", 0),
			MaxPark:          time.Duration(intArg(t, d, "park", 0)) * time.Second,
			MaxTotalInflight: int64(intArg(t, d, "total", 0)),
		}
		st.eps = st.eps[:0]
		for _, line := range nonEmptyLines(d.Input) {
			var ep EndpointSpec
			for _, f := range strings.Fields(line) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "role":
					ep.Role = map[string]Role{"none": RoleNone, "prefill": RolePrefill, "decode": RoleDecode, "bogus": 7}[v]
				case "w":
					ep.Weight = uint8(atoi(t, d, v))
				case "backup":
					ep.Backup = true
				case "addr":
					ep.Addr = v
				default:
					d.Fatalf(t, "unknown endpoint field %q", k)
				}
			}
			st.eps = append(st.eps, ep)
		}
		st.views = make([]EndpointView, len(st.eps))
		return st.rebuild()
	case "view", "set":
		if d.Cmd == "view" {
			st.views = make([]EndpointView, len(st.eps))
		}
		for _, line := range nonEmptyLines(d.Input) {
			fields := strings.Fields(line)
			i := atoi(t, d, fields[0])
			if i < 0 || i >= len(st.views) {
				d.Fatalf(t, "no endpoint %d", i)
			}
			st.applyView(t, d, &st.views[i], fields[1:])
		}
		return "ok\n"
	case "decide":
		return st.decide(t, d)
	case "resume":
		req := st.request(t, d)
		dec, err := st.router.Resume(st.now(t, d), &req, &Snapshot{Endpoints: st.views}, intArg(t, d, "ep", -1))
		if err != nil {
			return fmt.Sprintf("error: %v\n", err)
		}
		return formatDecision(&dec)
	case "ttft":
		ep := intArg(t, d, "ep", -1)
		in := TTFTInput{Uncached: uint32(intArg(t, d, "u", 0)), Queued: uint32(intArg(t, d, "q", 0)), Running: uint32(intArg(t, d, "n", 0))}
		actual := time.Duration(intArg(t, d, "actual", 0)) * time.Millisecond
		var step TTFTStep
		for range intArg(t, d, "repeat", 1) {
			p, _ := st.router.PredictTTFT(ep, in)
			step = st.router.ObserveTTFT(goldenEpoch, ep, TTFTPrediction{OK: true, Input: in, Predicted: p}, actual)
		}
		p, trusted := st.router.PredictTTFT(ep, in)
		return fmt.Sprintf("predicted=%v trusted=%t drifting=%t\n", p.Round(100*time.Microsecond), trusted, step.Verdict.Drifting)
	case "learn":
		st.router.Learn([]byte(strings.TrimSuffix(d.Input, "\n")), intArg(t, d, "ep", -1))
		if tr := st.router.Trie(); tr != nil {
			return fmt.Sprintf("trie entries=%d nodes=%d bytes=%d\n", tr.Len(), tr.Nodes(), tr.Bytes())
		}
		return "no trie\n"
	case "remove":
		st.router.RemoveEndpoint(intArg(t, d, "ep", -1))
		if tr := st.router.Trie(); tr != nil {
			return fmt.Sprintf("trie entries=%d nodes=%d bytes=%d\n", tr.Len(), tr.Nodes(), tr.Bytes())
		}
		return "ok\n"
	case "law":
		return st.law(t, d)
	case "sessions":
		st.table = NewSessionTable(SessionConfig{
			Shards: intArg(t, d, "shards", 1), MaxEntries: intArg(t, d, "cap", 0), TTL: st.svc.SessionTTL,
		})
		return fmt.Sprintf("ttl=%s shards=%d\n", st.svc.SessionTTL, st.table.NumShards())
	case "sput", "sget":
		key := d.CmdArgs[0].Vals[0]
		shard := st.table.Shard(st.table.ShardFor(key))
		if d.Cmd == "sput" {
			req := st.request(t, d)
			shard.Put(st.now(t, d), key, req.Session.Pin)
			return fmt.Sprintf("len=%d\n", shard.Len())
		}
		if got := shard.Get(st.now(t, d), key); got.Found {
			return fmt.Sprintf("found prefill=%d decode=%d\n", got.Pin.Prefill, got.Pin.Decode)
		}
		return "miss\n"
	case "sessionkey":
		var user, conv string
		if arg, ok := d.Arg("user"); ok {
			user = arg.SingleVal(t)
		}
		if arg, ok := d.Arg("conv"); ok {
			conv = arg.SingleVal(t)
		}
		key, src := SessionKeyFor(user, conv)
		return fmt.Sprintf("key=%q source=%s\n", key, [...]string{"none", "user_id", "x-conversation-id"}[src])
	case "sevict-ep", "ssweep":
		n := 0
		for i := 0; i < st.table.NumShards(); i++ {
			if d.Cmd == "sevict-ep" {
				n += st.table.Shard(i).EvictEndpoint(intArg(t, d, "ep", -1))
			} else {
				n += st.table.Shard(i).Sweep(st.now(t, d))
			}
		}
		return fmt.Sprintf("evicted=%d\n", n)
	case "fpark", "fnext", "fpeek", "fremove", "fvictim", "foutranks", "fadmit", "fdone", "fstate":
		return st.flowCmd(t, d)
	case "adaptive":
		var b strings.Builder
		arg, _ := d.Arg("loads")
		for _, v := range arg.Vals {
			l := uint64(atoi(t, d, v))
			fmt.Fprintf(&b, "L=%d eps_pct=%d lambda=%d\n", l, AdaptiveFactor(l), AdaptiveLambda(l))
		}
		return b.String()
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

func (st *goldenState) rebuild() string {
	if st.svc.Name == "" {
		return "" // env before any rule
	}
	r, err := NewRouter(st.svc, st.eps, st.env, RouterConfig{})
	if err != nil {
		st.router = nil
		return fmt.Sprintf("error: %v\n", err)
	}
	st.router = r
	st.session = map[string]Pin{}
	return "ok\n"
}

func (st *goldenState) applyView(t *testing.T, d *datadriven.TestData, v *EndpointView, fields []string) {
	for _, f := range fields {
		k, val, _ := strings.Cut(f, "=")
		switch k {
		case "conns":
			v.ActiveConns = uint32(atoi(t, d, val))
		case "queued":
			v.QueuedRequests = uint32(atoi(t, d, val))
		case "swap":
			v.SwapPressure = uint32(atoi(t, d, val))
		case "cap":
			v.KVCapacityBlocks = uint32(atoi(t, d, val))
		case "inv":
			v.InventoryBlocks = uint32(atoi(t, d, val))
		case "overlap":
			v.Overlap = uint32(atoi(t, d, val))
		case "offloaded":
			v.OverlapOffloaded = uint32(atoi(t, d, val))
		case "distrust":
			v.KVDistrusted = val != "false"
		case "parked":
			v.Parked = uint32(atoi(t, d, val))
		case "kvused":
			v.KVUsedBlocks, v.KVUsageKnown = uint32(atoi(t, d, val)), true
		case "prefillq":
			v.PrefillBlocks = uint32(atoi(t, d, val))
		case "weight":
			v.CtrlWeight = uint8(atoi(t, d, val))
		case "ctrl":
			v.Ctrl = map[string]CtrlState{"none": CtrlNone, "active": CtrlActive, "draining": CtrlDraining, "disabled": CtrlDisabled}[val]
		case "down":
			v.Down = val != "false"
		case "cb":
			v.BreakerOpen = val != "false"
		case "drain":
			v.Draining = val != "false"
		default:
			d.Fatalf(t, "unknown view field %q", k)
		}
	}
}

func (st *goldenState) now(t *testing.T, d *datadriven.TestData) time.Time {
	return goldenEpoch.Add(time.Duration(intArg(t, d, "now", 0)) * time.Second)
}

func (st *goldenState) request(t *testing.T, d *datadriven.TestData) Request {
	var req Request
	req.Prompt = []byte(strings.TrimSuffix(d.Input, "\n"))
	if arg, ok := d.Arg("key"); ok {
		req.SessionKey = arg.SingleVal(t)
	}
	if arg, ok := d.Arg("pin"); ok {
		pd := strings.Split(strings.Join(arg.Vals, ","), ",")
		if len(pd) != 2 {
			d.Fatalf(t, "pin wants P,D")
		}
		req.Session = SessionLookup{Found: true, Pin: Pin{Prefill: atoi(t, d, pd[0]), Decode: atoi(t, d, pd[1])}}
	} else if p, ok := st.session[req.SessionKey]; ok && req.SessionKey != "" {
		req.Session = SessionLookup{Found: true, Pin: p}
	}
	req.KV.PromptBlocks = uint32(intArg(t, d, "blocks", 0))
	req.KV.PromptTokens = uint32(intArg(t, d, "tokens", 0))
	if arg, ok := d.Arg("guard"); ok {
		req.KV.Guard = parseReason(t, d, arg.SingleVal(t))
	}
	if d.HasArg("prefix") {
		req.PrefixHash, req.HasPrefixHash = u64Arg(t, d, "prefix"), true
	}
	if d.HasArg("conv") {
		req.ConvHash, req.HasConvHash = u64Arg(t, d, "conv"), true
	}
	req.ClientHash = u64Arg(t, d, "client")
	if arg, ok := d.Arg("ckey"); ok {
		req.ClientKey = arg.SingleVal(t)
	}
	if arg, ok := d.Arg("class"); ok {
		c, ok := ParseClass(arg.SingleVal(t))
		if !ok {
			d.Fatalf(t, "bad class %q", arg.SingleVal(t))
		}
		req.Class = c
	}
	req.TTFTObjective = time.Duration(intArg(t, d, "objective", 0)) * time.Millisecond
	req.OutranksParked = d.HasArg("outranks")
	return req
}

func (st *goldenState) decide(t *testing.T, d *datadriven.TestData) string {
	if st.router == nil {
		d.Fatalf(t, "no router")
	}
	repeat := intArg(t, d, "repeat", 1)
	var b strings.Builder
	for k := 0; k < repeat; k++ {
		req := st.request(t, d)
		snap := Snapshot{Endpoints: st.views, TotalInflight: uint64(intArg(t, d, "total", 0))}
		if arg, ok := d.Arg("parked"); ok {
			for i, v := range arg.Vals {
				snap.ParkedByClass[i] = uint32(atoi(t, d, v))
			}
		}
		dec, err := st.router.Decide(st.now(t, d), &req, &snap)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
			continue
		}
		if repeat > 1 {
			fmt.Fprintf(&b, "#%d ", k+1)
		}
		b.WriteString(formatDecision(&dec))
		if req.TTFTObjective > 0 && dec.TTFT.OK {
			fmt.Fprintf(&b, "  ttft: predicted=%v trusted=%t objective=%v\n", dec.TTFT.Predicted.Round(100*time.Microsecond), dec.TTFT.Trusted, req.TTFTObjective)
		}
		if d.HasArg("load") && dec.Available() {
			st.views[dec.Prefill].ActiveConns++
			if dec.Decode >= 0 {
				st.views[dec.Decode].ActiveConns++
			}
		}
		if d.HasArg("load") && dec.Admission == Park {
			st.views[dec.ParkOn].Parked++
		}
		if d.HasArg("pinned") {
			if dec.EvictSession {
				delete(st.session, req.SessionKey)
			}
			if dec.PinSession && dec.Available() {
				st.session[req.SessionKey] = Pin{Prefill: dec.Prefill, Decode: dec.Decode}
			}
		}
	}
	return b.String()
}

func formatDecision(dec *Decision) string {
	var b strings.Builder
	b.WriteString(dec.String())
	if dec.PinSession {
		b.WriteString(" pin_session")
	}
	if !dec.ParkDeadline.IsZero() {
		fmt.Fprintf(&b, " park_deadline=+%s", dec.ParkDeadline.Sub(goldenEpoch))
	}
	b.WriteByte('\n')
	if k := dec.KV; k.Ran {
		fmt.Fprintf(&b, "  kv: mode=%s factor=%d lambda=%d L=%d cands=%d best=%d affinity=%d relief=%v\n",
			k.Mode, k.FactorPct, k.Lambda, k.Load, k.Candidates, k.BestOverlap, k.Affinity, k.Relief)
	}
	return b.String()
}

func (st *goldenState) law(t *testing.T, d *datadriven.TestData) string {
	var p LawParams
	arg, ok := d.Arg("mode")
	if !ok {
		d.Fatalf(t, "law needs mode=")
	}
	m, ok := ParseLBMode(arg.SingleVal(t))
	if !ok {
		d.Fatalf(t, "bad mode %q", arg.SingleVal(t))
	}
	p.Mode = m
	p.FactorPct = uint32(intArg(t, d, "factor", 175))
	p.Lambda = uint32(intArg(t, d, "lambda", 32))
	blocks := uint32(intArg(t, d, "blocks", 0))
	var cs []Candidate
	for _, line := range nonEmptyLines(d.Input) {
		fields := strings.Fields(line)
		c := Candidate{Endpoint: atoi(t, d, fields[0]), Capacity: 1}
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "overlap":
				c.Overlap = uint32(atoi(t, d, v))
			case "load":
				c.Load = uint32(atoi(t, d, v))
			case "cap":
				c.Capacity = uint64(atoi(t, d, v))
			case "room":
				c.Headroom = uint32(atoi(t, d, v))
			default:
				d.Fatalf(t, "unknown candidate field %q", k)
			}
		}
		cs = append(cs, c)
	}
	res := SelectUnified(cs, blocks, p)
	var b strings.Builder
	fmt.Fprintf(&b, "L=%d total_cap=%d factor=%d lambda=%d\n", res.TotalLoad, res.TotalCap, res.FactorPct, res.Lambda)
	meanCap := MeanCapacity(cs)
	pb := blocks
	for i := range cs {
		pb = max(pb, cs[i].Overlap)
	}
	for i := range cs {
		c := &cs[i]
		switch p.Mode {
		case LBSoft, LBAdaptiveSoft:
			fmt.Fprintf(&b, "ep%d overlap=%d load=%d cap=%d cost=%d\n", c.Endpoint, c.Overlap, c.Load, c.Capacity, SoftCost(c, pb, res.Lambda, meanCap))
		case LBOff:
			fmt.Fprintf(&b, "ep%d overlap=%d load=%d\n", c.Endpoint, c.Overlap, c.Load)
		default:
			capI := CapFor(res.TotalLoad, c.capacity(), res.TotalCap, res.FactorPct)
			state := "under"
			if !c.under(res.TotalLoad, res.TotalCap, res.FactorPct) {
				state = "over"
			}
			room := ""
			if c.Headroom > 0 {
				room = fmt.Sprintf(" room=%d", c.Headroom)
			}
			fmt.Fprintf(&b, "ep%d overlap=%d load=%d cap=%d cap_i=%d%s %s\n", c.Endpoint, c.Overlap, c.Load, c.Capacity, capI, room, state)
		}
	}
	if res.Pos < 0 {
		b.WriteString("pick=none\n")
		return b.String()
	}
	fmt.Fprintf(&b, "pick=ep%d affinity=ep%d spilled=%v saturated=%v negligible=%v\n",
		cs[res.Pos].Endpoint, cs[res.Affinity].Endpoint, res.Spilled, res.Saturated, res.Negligible)
	return b.String()
}

func parseReason(t *testing.T, d *datadriven.TestData, s string) Reason {
	for r := ReasonNone; r < reasonCount; r++ {
		if r.String() == s {
			return r
		}
	}
	if n, err := strconv.Atoi(s); err == nil {
		return Reason(n)
	}
	d.Fatalf(t, "unknown reason %q", s)
	return ReasonNone
}

// u64Arg parses a hash argument (decimal or 0x-prefixed hex); 0 when absent.
func u64Arg(t *testing.T, d *datadriven.TestData, key string) uint64 {
	arg, ok := d.Arg(key)
	if !ok {
		return 0
	}
	n, err := strconv.ParseUint(arg.SingleVal(t), 0, 64)
	if err != nil {
		d.Fatalf(t, "bad hash %q", arg.SingleVal(t))
	}
	return n
}

func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	arg, ok := d.Arg(key)
	if !ok {
		return def
	}
	return atoi(t, d, arg.SingleVal(t))
}

func atoi(t *testing.T, d *datadriven.TestData, s string) int {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		d.Fatalf(t, "bad integer %q", s)
	}
	return n
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// flowCmd runs the FlowQueue commands.
func (st *goldenState) flowCmd(t *testing.T, d *datadriven.TestData) string {
	if st.flow == nil {
		st.flow, st.flowLog = NewFlowQueue(), map[string]bool{}
	}
	q := st.flow
	class := ClassStandard
	if arg, ok := d.Arg("class"); ok {
		c, ok := ParseClass(arg.SingleVal(t))
		if !ok {
			d.Fatalf(t, "bad class %q", arg.SingleVal(t))
		}
		class = c
	}
	tenant := ""
	if arg, ok := d.Arg("tenant"); ok {
		tenant = arg.SingleVal(t)
	}
	st.flowLog[tenant] = true
	entry := func(e FlowEntry, ok bool) string {
		if !ok {
			return "none\n"
		}
		return fmt.Sprintf("id=%d class=%s tenant=%q seq=%d\n", e.ID, e.Class, e.Tenant, e.Seq)
	}
	switch d.Cmd {
	case "fpark":
		allowed := ^EndpointSet(0)
		if arg, ok := d.Arg("allowed"); ok {
			allowed = 0
			for _, v := range arg.Vals {
				allowed = allowed.With(atoi(t, d, v))
			}
		}
		e, ok := q.Park(FlowEntry{ID: uint64(intArg(t, d, "id", 0)), Class: class, Tenant: tenant, Allowed: allowed})
		if !ok {
			return "duplicate\n"
		}
		return fmt.Sprintf("parked seq=%d counter=%d\n", e.Seq, q.Counter(class, tenant))
	case "fnext":
		return entry(q.Next(intArg(t, d, "ep", 0)))
	case "fpeek":
		return entry(q.Peek(intArg(t, d, "ep", 0)))
	case "fremove":
		return entry(q.Remove(uint64(intArg(t, d, "id", 0))))
	case "fvictim":
		return entry(q.Victim(class, tenant, uint64(intArg(t, d, "cost", 1))))
	case "foutranks":
		return fmt.Sprintf("%v\n", q.Outranks(class, tenant, uint64(intArg(t, d, "cost", 1))))
	case "fadmit":
		q.Admitted(class, tenant, uint64(intArg(t, d, "tokens", 0)))
		return fmt.Sprintf("counter=%d\n", q.Counter(class, tenant))
	case "fdone":
		q.Done(class, tenant, uint64(intArg(t, d, "tokens", 0)))
		return fmt.Sprintf("counter=%d\n", q.Counter(class, tenant))
	}
	// fstate
	var b strings.Builder
	names := make([]string, 0, len(st.flowLog))
	for n := range st.flowLog {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "parked=%d\n", q.Len())
	for ci := 0; ci < NumClasses; ci++ {
		c := ClassAt(ci)
		band := &q.bands[ci]
		for _, n := range names {
			tq := band.tenants[n]
			if tq == nil {
				continue
			}
			ids := make([]string, len(tq.items))
			for i, e := range tq.items {
				ids[i] = strconv.FormatUint(e.ID, 10)
			}
			fmt.Fprintf(&b, "%s %q counter=%d inflight=%d parked=[%s]\n", c, n, tq.counter, tq.inflight, strings.Join(ids, " "))
		}
	}
	return b.String()
}
