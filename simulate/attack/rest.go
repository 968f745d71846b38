package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The REST family: the control plane on its loopback listener, attacked
// with thousands of bad requests. Oracle: never a 5xx, never an answer
// slower than restSlow, an error body that is LoxiLB's JSON, a rule that
// is accepted runs, round-trips (its GET output re-POSTed is a 409) and
// can be deleted by its key; controller epochs only move forward; and at
// the end llbd is alive, rules.json is bounded, and a SIGKILL loses no
// acknowledged write.

// restMaxRules is the --max-rules the REST family runs llbd with, so the
// limit is reached in a run (the default is 1024).
const restMaxRules = 48

// restMaxRuleBytes is llbd's default --max-rule-bytes.
const restMaxRuleBytes = 64 << 10

// restSlow is the longest a REST answer may take before it counts as a
// hang (the write path fsyncs rules.json; a rule with 20 000 annotation
// keys takes a while to validate).
const restSlow = 5 * time.Second

// restFamily is one run of the REST family.
type restFamily struct {
	cfg *Config
	net loopNet
	d   *daemon
	t   *Tally

	// ctl is the controller target: a running rule whose endpoints the
	// controller cases update, with the highest epoch applied to each.
	ctl struct {
		key    string
		epochs [3]uint64
	}
	// sentinels are the ports of the sentinel rules (VIP hostRESTSent)
	// whose creation was acknowledged and deletion was not.
	sentinels map[int]bool
	nextSent  int
	// sweep is every (template, string field, hostile value): every third
	// case takes the next one until all ran.
	sweep []sweepCase
}

// restKinds are the case generators with their weights.
var restKinds = []struct {
	name   string
	weight int
	run    func(f *restFamily, ctx context.Context, rng *rand.Rand) (Outcome, func() string)
}{
	{"mutated_rule", 50, (*restFamily).mutatedRule},
	{"raw_body", 8, (*restFamily).rawBody},
	{"bad_path", 10, (*restFamily).badPath},
	{"controller", 14, (*restFamily).controller},
	{"inventory", 4, (*restFamily).inventory},
	{"loop_rule", 6, (*restFamily).loopRule},
	{"sentinel", 8, (*restFamily).sentinel},
}

func pickKind[T any](rng *rand.Rand, kinds []T, weight func(T) int) T {
	total := 0
	for _, k := range kinds {
		total += weight(k)
	}
	x := rng.IntN(total)
	for _, k := range kinds {
		if x -= weight(k); x < 0 {
			return k
		}
	}
	return kinds[len(kinds)-1]
}

// runREST runs the family within budget.
func runREST(ctx context.Context, cfg *Config, n loopNet, budget time.Duration) (*Tally, error) {
	t := newTally(FamilyREST)
	d, err := startDaemon(ctx, cfg.LLBD, cfg.WorkDir, FamilyREST, nil, []string{"--max-rules", strconv.Itoa(restMaxRules)})
	if err != nil {
		return t, err
	}
	defer d.Kill()
	f := &restFamily{cfg: cfg, net: n, d: d, t: t, sentinels: map[int]bool{}, sweep: sweepCases(n)}
	if err := f.setup(ctx); err != nil {
		return t, err
	}
	t.note("llbd --max-rules %d; REST bounds: read-header 10 s, read 30 s, body 1 MiB", restMaxRules)
	deadline := time.Now().Add(budget)
	slow := f.slowClients(ctx, budget)
	eachCase(ctx, cfg, FamilyREST, deadline, func(i int, rng *rand.Rand) {
		if sweep := i / 3; i%3 == 2 && sweep < len(f.sweep) {
			o, repro := f.stringSweep(ctx, f.sweep[sweep])
			t.add(i, "string_sweep", o, repro)
		} else {
			k := pickKind(rng, restKinds, func(k struct {
				name   string
				weight int
				run    func(f *restFamily, ctx context.Context, rng *rand.Rand) (Outcome, func() string)
			}) int {
				return k.weight
			})
			o, repro := k.run(f, ctx, rng)
			t.add(i, k.name, o, repro)
		}
	})
	for _, r := range slow() {
		t.add(-1, r.kind, r.o, func() string { return r.repro })
	}
	f.checkLimit(ctx)
	f.checkEnd(ctx)
	return t, ctx.Err()
}

// setup creates the controller target rule and waits until it runs.
func (f *restFamily) setup(ctx context.Context) error {
	vip := f.net.ip(hostRESTCtl)
	body := fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":20000,"protocol":"tcp","sel":0,"mode":4,"name":"atk-controller","probetype":"none"},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1},{"endpointIP":%q,"targetPort":8000,"weight":1},{"endpointIP":%q,"targetPort":8000,"weight":1}]}`,
		vip, f.net.ip(hostRESTEPLo), f.net.ip(hostRESTEPLo+1), f.net.ip(hostRESTEPLo+2))
	r, err := f.d.do(ctx, http.MethodPost, "/netlox/v1/config/loadbalancer", "application/json", []byte(body))
	if err != nil || r.code != http.StatusOK {
		return fmt.Errorf("create the controller target rule: %d %s %v", r.code, r.body, err)
	}
	f.ctl.key = "tcp:" + vip + ":20000"
	deadline := time.Now().Add(10 * time.Second)
	for {
		var v struct {
			Services []struct {
				Endpoints []struct {
					State string `json:"state"`
				} `json:"endpoints"`
			} `json:"services"`
		}
		err := f.d.getJSON(ctx, "/netlox/v1/config/ai/controller?service="+url.QueryEscape(f.ctl.key), &v)
		if err == nil && len(v.Services) == 1 && len(v.Services[0].Endpoints) == 3 && v.Services[0].Endpoints[0].State != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the controller target rule never ran: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// judgeREST is the verdict every REST answer gets before its case's own
// checks: a transport failure, a 5xx or a slow answer is a defect; a 4xx
// must carry LoxiLB's JSON error (a GET miss may be empty; net/http's own
// refusal of a request it cannot take — 431 for a 64 KiB URL — is text).
func judgeREST(method string, r reply, err error) (Outcome, bool) {
	switch {
	case err != nil:
		return defect("no answer after %v: %v", r.elapsed.Round(time.Millisecond), err), false
	case r.code >= 500:
		return defect("%d %s", r.code, short(r.body)), false
	case r.elapsed > restSlow:
		return defect("answered %d after %v (bound %v)", r.code, r.elapsed.Round(time.Millisecond), restSlow), false
	case r.code >= 400:
		netHTTP := strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") && bytes.HasPrefix(r.body, []byte(strconv.Itoa(r.code)))
		if !loxiError(r.body) && !netHTTP && !(method == http.MethodGet && r.code == http.StatusNotFound && len(r.body) == 0) {
			return defect("%d with a body that is not LoxiLB's error JSON: %s", r.code, short(r.body)), false
		}
		return refused(), false
	}
	return accepted(), true
}

// loxiError reports whether b is LoxiLB's error body {"code","message",...}.
func loxiError(b []byte) bool {
	var e struct {
		Code    *int    `json:"code"`
		Message *string `json:"message"`
	}
	return json.Unmarshal(b, &e) == nil && e.Code != nil && e.Message != nil
}

// short quotes the start of b.
func short(b []byte) string { return quote(bytes.TrimSpace(b), 300) }

// reproHTTP shows a request as its method, path, content type and body.
func reproHTTP(method, path, ctype string, body []byte) func() string {
	return func() string {
		s := fmt.Sprintf("%s %s", method, quote([]byte(path), 600))
		if ctype != "" {
			s += " (Content-Type: " + ctype + ")"
		}
		if body != nil {
			s += "\nbody: " + quote(body, 1500)
		}
		return s
	}
}

// post sends a rule body and judges the answer; an accepted rule then gets
// the accepted-rule checks and is deleted.
func (f *restFamily) post(ctx context.Context, ctype string, body []byte, mustRefuse string) Outcome {
	before, err := f.ruleSet(ctx)
	if err != nil {
		return defect("GET /all before the POST: %v", err)
	}
	r, err := f.d.do(ctx, http.MethodPost, "/netlox/v1/config/loadbalancer", ctype, body)
	o, ok := judgeREST(http.MethodPost, r, err)
	if !ok {
		return o
	}
	if r.code != http.StatusOK {
		return defect("unexpected %d %s", r.code, short(r.body))
	}
	o = f.checkAccepted(ctx, before)
	if mustRefuse != "" && o.Verdict != Defective {
		return defect("accepted (200) though %s", mustRefuse)
	}
	return o
}

// storedRule is one rule as GET /all lists it.
type storedRule struct {
	raw json.RawMessage
	sa  struct {
		ExternalIP string `json:"externalIP"`
		Port       int    `json:"port"`
		PortMax    int    `json:"portMax"`
		Protocol   string `json:"protocol"`
		Block      uint32 `json:"block"`
		Host       string `json:"host"`
		Name       string `json:"name"`
		// The inference gateway's L7 key.
		PathPrefix    string `json:"path_prefix"`
		PathMatchMode string `json:"path_match_mode"`
		ModelName     string `json:"model_name"`
	}
}

// pathMode is the key's path_match_mode ("" for disabled).
func (s storedRule) pathMode() string {
	if s.sa.PathMatchMode == "disabled" {
		return ""
	}
	return s.sa.PathMatchMode
}

// key is the rule's key as llbd prints it.
func (s storedRule) key() string {
	k := s.sa.Protocol + ":" + hostPort(s.sa.ExternalIP, s.sa.Port)
	if s.sa.PortMax != 0 {
		k += "-" + strconv.Itoa(s.sa.PortMax)
	}
	if s.sa.Block != 0 {
		k += "/block=" + strconv.FormatUint(uint64(s.sa.Block), 10)
	}
	if s.sa.Host != "" {
		k += "@" + s.sa.Host
	}
	if s.sa.PathPrefix != "" || s.pathMode() != "" {
		m := s.pathMode()
		if m == "" {
			m = "disabled"
		}
		k += "|" + m + ":" + s.sa.PathPrefix
	}
	if s.sa.ModelName != "" {
		k += "|model=" + s.sa.ModelName
	}
	return k
}

func hostPort(ip string, port int) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:" + strconv.Itoa(port)
	}
	return ip + ":" + strconv.Itoa(port)
}

// deletePath is the exact DELETE path of the rule's key.
func (s storedRule) deletePath() string {
	p := "/netlox/v1/config/loadbalancer"
	if s.sa.Host != "" {
		p += "/hosturl/" + url.PathEscape(s.sa.Host)
	}
	p += "/externalipaddress/" + url.PathEscape(s.sa.ExternalIP) + "/port/" + strconv.Itoa(s.sa.Port)
	if s.sa.PortMax != 0 {
		p += "/portmax/" + strconv.Itoa(s.sa.PortMax)
	}
	p += "/protocol/" + url.PathEscape(s.sa.Protocol)
	q := url.Values{}
	if s.sa.Block != 0 {
		q.Set("block", strconv.FormatUint(uint64(s.sa.Block), 10))
	}
	if s.sa.PathPrefix != "" {
		q.Set("path_prefix", s.sa.PathPrefix)
	}
	if m := s.pathMode(); m != "" {
		q.Set("path_match_mode", m)
	}
	if s.sa.ModelName != "" {
		q.Set("model_name", s.sa.ModelName)
	}
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

// ruleSet lists the rules by key.
func (f *restFamily) ruleSet(ctx context.Context) (map[string]storedRule, error) {
	var all struct {
		LbAttr []json.RawMessage `json:"lbAttr"`
	}
	if err := f.d.getJSON(ctx, "/netlox/v1/config/loadbalancer/all", &all); err != nil {
		return nil, err
	}
	out := make(map[string]storedRule, len(all.LbAttr))
	for _, raw := range all.LbAttr {
		var s storedRule
		var env struct {
			SA json.RawMessage `json:"serviceArguments"`
		}
		if err := json.Unmarshal(raw, &env); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(env.SA, &s.sa); err != nil {
			return nil, err
		}
		s.raw = raw
		out[s.key()] = s
	}
	return out, nil
}

// checkAccepted runs the accepted-rule oracle on the rule a POST just
// created (or replaced): it is listed, GET by key finds it, its own GET
// output re-POSTed is a 409 (normalisation is idempotent), it runs (no
// applyError: "a rule accepted here always runs"), and DELETE by its key
// removes it.
func (f *restFamily) checkAccepted(ctx context.Context, before map[string]storedRule) Outcome {
	after, err := f.ruleSet(ctx)
	if err != nil {
		return defect("GET /all after an accepted POST: %v", err)
	}
	var rules []storedRule
	for k, s := range after {
		if b, ok := before[k]; !ok || !bytes.Equal(b.raw, s.raw) {
			rules = append(rules, s)
		}
	}
	if len(rules) == 0 {
		return accepted() // an identical replace of a rule the case named
	}
	for _, s := range rules {
		if _, existed := before[s.key()]; existed {
			return defect("an accepted POST replaced rule %s, which the case did not name", s.key())
		}
		if o := f.roundTrip(ctx, s); o.Verdict == Defective {
			f.remove(ctx, s)
			return o
		}
	}
	return accepted()
}

// roundTrip is the per-rule part of checkAccepted; it deletes the rule.
// Every step is judged as any REST answer is (no 5xx, within restSlow).
func (f *restFamily) roundTrip(ctx context.Context, s storedRule) Outcome {
	step := func(method, path string, body []byte, want int) (reply, Outcome) {
		r, err := f.d.do(ctx, method, path, "application/json", body)
		if o, _ := judgeREST(method, r, err); o.Verdict == Defective {
			return r, defect("accepted rule %s: %s %s: %s", s.key(), method, path, o.Why)
		}
		if r.code != want {
			return r, defect("accepted rule %s: %s %s: %d %s (want %d)", s.key(), method, path, r.code, short(r.body), want)
		}
		return r, accepted()
	}
	keyPath := "/netlox/v1/config/loadbalancer/externalipaddress/" + url.PathEscape(s.sa.ExternalIP) +
		"/port/" + strconv.Itoa(s.sa.Port) + "/protocol/" + url.PathEscape(s.sa.Protocol)
	if _, o := step(http.MethodGet, keyPath, nil, http.StatusOK); o.Verdict == Defective {
		return o
	}
	if _, o := step(http.MethodPost, lbPath, s.raw, http.StatusConflict); o.Verdict == Defective {
		o.Why += "; its own GET output re-POSTed should be identical (409): " + quote(s.raw, 600)
		return o
	}
	r, o := step(http.MethodGet, keyPath+"/status", nil, http.StatusOK)
	if o.Verdict == Defective {
		return o
	}
	var st struct {
		ApplyError string `json:"applyError"`
	}
	if err := json.Unmarshal(r.body, &st); err != nil {
		return defect("accepted rule %s: status %s: %v", s.key(), short(r.body), err)
	}
	if st.ApplyError != "" {
		return defect("accepted rule %s does not run: applyError %q", s.key(), st.ApplyError)
	}
	if _, o := step(http.MethodDelete, s.deletePath(), nil, http.StatusOK); o.Verdict == Defective {
		o.Why += " (cannot be deleted by its key)"
		return o
	}
	return accepted()
}

// remove deletes a rule by key, else by name, else by detaching every
// endpoint; it reports a rule that stays.
func (f *restFamily) remove(ctx context.Context, s storedRule) {
	if r, err := f.d.do(ctx, http.MethodDelete, s.deletePath(), "", nil); err == nil && r.code == http.StatusOK {
		return
	}
	if s.sa.Name != "" {
		_, _ = f.d.do(ctx, http.MethodDelete, "/netlox/v1/config/loadbalancer/name/"+url.PathEscape(s.sa.Name), "", nil)
	}
	after, err := f.ruleSet(ctx)
	if _, stays := after[s.key()]; err == nil && stays {
		f.t.note("rule %s could not be removed (left in place)", s.key())
	}
}

// checkLimit fills the table to --max-rules and checks that one more is
// refused with 422, then removes what it added.
func (f *restFamily) checkLimit(ctx context.Context) {
	have, err := f.ruleSet(ctx)
	if err != nil {
		f.t.check("rule_limit", false, "GET /all: "+err.Error(), "")
		return
	}
	vip := f.net.ip(hostRESTVIPHi)
	var added []int
	body := func(port int) []byte {
		return fmt.Appendf(nil, `{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"atk-limit","probetype":"none"},`+
			`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1}]}`, vip, port, f.net.ip(hostRESTEPHi))
	}
	ok, why := true, ""
	for port := 40000; len(have)+len(added) < restMaxRules && port < 40000+restMaxRules; port++ {
		r, err := f.d.do(ctx, http.MethodPost, "/netlox/v1/config/loadbalancer", "application/json", body(port))
		if err != nil || r.code != http.StatusOK {
			ok, why = false, fmt.Sprintf("rule %d of %d refused: %d %s %v", len(have)+len(added)+1, restMaxRules, r.code, short(r.body), err)
			break
		}
		added = append(added, port)
	}
	if ok {
		r, err := f.d.do(ctx, http.MethodPost, "/netlox/v1/config/loadbalancer", "application/json", body(40000+restMaxRules))
		if err != nil || r.code != http.StatusUnprocessableEntity {
			ok, why = false, fmt.Sprintf("rule %d of --max-rules %d: %d %s %v (want 422)", restMaxRules+1, restMaxRules, r.code, short(r.body), err)
			if r.code == http.StatusOK {
				added = append(added, 40000+restMaxRules)
			}
		}
	}
	f.t.check("rule_limit", ok, why, fmt.Sprintf("POST %d rules, then one more", restMaxRules))
	for _, port := range added {
		_, _ = f.d.do(ctx, http.MethodDelete, fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp", vip, port), "", nil)
	}
}

// checkEnd is the family's closing oracle: alive, rules.json bounded,
// sentinels as acknowledged, controller epochs as applied, and all of it
// still there after a SIGKILL and a restart.
func (f *restFamily) checkEnd(ctx context.Context) {
	err := f.d.alive(ctx)
	f.t.check("alive", err == nil, fmt.Sprint(err), "")
	if err != nil {
		return
	}
	fi, err := os.Stat(filepath.Join(f.d.stateDir, "rules.json"))
	bound := int64(restMaxRules) * restMaxRuleBytes
	f.t.check("rules_json_bounded", err == nil && fi.Size() <= bound, fmt.Sprintf("rules.json: %v, %d bytes (bound %d)", err, sizeOf(fi), bound), "")
	f.t.note("rules.json at the end: %d bytes", sizeOf(fi))
	f.checkSentinels(ctx, "before the SIGKILL")
	f.checkEpochs(ctx)
	before, err := f.ruleSet(ctx)
	if err != nil {
		f.t.check("persist", false, "GET /all: "+err.Error(), "")
		return
	}
	if err := f.d.restart(ctx); err != nil {
		f.t.check("restart", false, "llbd did not come back on its state after a SIGKILL: "+err.Error(), "")
		return
	}
	after, err := f.ruleSet(ctx)
	lost := []string{}
	for k, s := range before {
		if a, ok := after[k]; !ok || !sameRule(a.raw, s.raw) {
			lost = append(lost, k)
		}
	}
	slices.Sort(lost)
	f.t.check("persist", err == nil && len(lost) == 0 && len(after) == len(before),
		fmt.Sprintf("after SIGKILL and restart: %d rules (had %d), changed or lost %v, %v", len(after), len(before), lost, err), "")
	f.checkSentinels(ctx, "after the SIGKILL")
	err = f.d.alive(ctx)
	f.t.check("alive", err == nil, fmt.Sprint(err), "")
	f.d.checkLog(f.t)
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return -1
	}
	return fi.Size()
}

// sameRule compares two GET outputs of a rule without the GET-only
// endpoint fields that change with traffic and probes.
func sameRule(a, b json.RawMessage) bool {
	norm := func(raw json.RawMessage) string {
		var v map[string]any
		if json.Unmarshal(raw, &v) != nil {
			return string(raw)
		}
		if eps, ok := v["endpoints"].([]any); ok {
			for _, e := range eps {
				if m, ok := e.(map[string]any); ok {
					delete(m, "state")
					delete(m, "counter")
				}
			}
		}
		out, _ := json.Marshal(v)
		return string(out)
	}
	return norm(a) == norm(b)
}

// checkSentinels compares the sentinel rules llbd lists with the
// acknowledged creates and deletes.
func (f *restFamily) checkSentinels(ctx context.Context, when string) {
	rules, err := f.ruleSet(ctx)
	if err != nil {
		f.t.check("sentinels", false, when+": GET /all: "+err.Error(), "")
		return
	}
	vip := f.net.ip(hostRESTSent)
	var extra, missing []int
	for _, s := range rules {
		if s.sa.ExternalIP == vip && !f.sentinels[s.sa.Port] {
			extra = append(extra, s.sa.Port)
		}
	}
	for port := range f.sentinels {
		if _, ok := rules["tcp:"+vip+":"+strconv.Itoa(port)]; !ok {
			missing = append(missing, port)
		}
	}
	f.t.check("sentinels", len(extra)+len(missing) == 0,
		fmt.Sprintf("%s: acknowledged creates missing %v, acknowledged deletes back %v", when, missing, extra), "")
}

// checkEpochs compares GET /config/ai/controller with the epochs the
// controller cases had acknowledged.
func (f *restFamily) checkEpochs(ctx context.Context) {
	got, err := f.appliedEpochs(ctx)
	ok := err == nil && slices.Equal(got, f.ctl.epochs[:])
	f.t.check("controller_epochs", ok, fmt.Sprintf("controller epochs %v, acknowledged %v (%v)", got, f.ctl.epochs, err), "")
}
