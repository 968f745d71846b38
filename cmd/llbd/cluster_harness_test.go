package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/internal/etcdtest"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// The cluster rig: real llbd processes in cluster mode (docs/scale-out.md)
// on one real etcd (1 or 3 members), in front of a simulated P/D fleet
// (real HTTP, real ZMQ KV events). Every replica has its own loopback
// address: its REST API, its cluster address and, with --data-bind, the
// rule's listener. The short scenarios run in go test; LLB_CLUSTER_LONG=1
// (make cluster-test) runs the long ones and prints the issue-11 figures.

// envClusterLong selects the long cluster soaks.
const envClusterLong = "LLB_CLUSTER_LONG"

// Ports every replica binds on its own address.
const (
	replicaRESTPort    = 11111
	replicaClusterPort = 7946
)

// clusterRig is one test's cluster.
type clusterRig struct {
	t        *testing.T
	net      chaosNet
	name     string
	bin      string
	etcd     *etcdtest.Cluster
	fleet    *fleet.Fleet
	replicas []*replicaProc
	// vip and port are the rule's identity (its listener is on each
	// replica's own address).
	vip  string
	port int
	// decisionTimeout is rigConfig.decisionTimeout.
	decisionTimeout time.Duration
}

// replicaProc is one llbd replica.
type replicaProc struct {
	*daemon
	idx int
	ip  string
	// args restart it the same way.
	args []string
}

// rigConfig shapes a rig.
type rigConfig struct {
	replicas, etcdMembers int
	prefill, decode       int
	// single is a number of role-less workers (a single-pool rule).
	single int
	// dialect is the engine the workers speak as ("": vLLM); blockSize,
	// when set, their tokens per block.
	dialect   worker.Dialect
	blockSize int
	// scale is the workers' latency time scale (1 = an H100's speed).
	scale float64
	// decisionTimeout, when set, is every replica's --decision-timeout
	// (a session lookup on another replica waits that long).
	decisionTimeout time.Duration
}

// startRig starts etcd, the fleet and the replicas, and waits until every
// replica sees every other as a member.
func startRig(t *testing.T, rc rigConfig) *clusterRig {
	t.Helper()
	if rc.scale == 0 {
		rc.scale = 0.2
	}
	r := &clusterRig{t: t, net: newChaosNet(), bin: buildDaemon(t), port: chaosVIPPort, decisionTimeout: rc.decisionTimeout}
	r.name = fmt.Sprintf("t%d-%d", r.net.a, r.net.b)
	r.vip = r.net.ip(1)
	r.etcd = etcdtest.Start(t, etcdtest.Options{Members: rc.etcdMembers})
	tmpl := worker.DefaultConfig()
	tmpl.Dialect = rc.dialect
	if rc.blockSize != 0 {
		tmpl.Engine.BlockSize = rc.blockSize
	}
	fl, err := fleet.Start(fleet.Config{
		Prefill: rc.prefill, Decode: rc.decode, Single: rc.single, BaseIP: r.net.ip(10), HTTPPort: chaosHTTPPort,
		Template:  &tmpl,
		Customize: func(_ int, _ ladder.Role, c *worker.Config) { c.Engine.Latency.TimeScale = rc.scale },
	})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = fl.Stop(ctx)
	})
	r.fleet = fl
	for i := 0; i < rc.replicas; i++ {
		r.replicas = append(r.replicas, r.startReplica(i))
	}
	r.waitMembers(rc.replicas, 15*time.Second)
	return r
}

// replicaArgs are replica i's flags.
func (r *clusterRig) replicaArgs(i int) []string {
	ip := r.net.ip(2 + i)
	args := []string{
		"--listen", fmt.Sprintf("%s:%d", ip, replicaRESTPort), "--state-dir", r.t.TempDir(),
		"--log-format", "json", "--log-level", "info",
		"--cluster-name", r.name, "--cluster-advertise", fmt.Sprintf("%s:%d", ip, replicaClusterPort),
		"--etcd-endpoints", strings.Join(r.etcd.Endpoints(), ","), "--data-bind", ip,
	}
	if r.decisionTimeout > 0 {
		args = append(args, "--decision-timeout", r.decisionTimeout.String())
	}
	return args
}

func (r *clusterRig) startReplica(i int) *replicaProc {
	r.t.Helper()
	args := r.replicaArgs(i)
	// startDaemonEnv waits for "configuration writes accepted": in cluster
	// mode, once the replica read the rules from etcd.
	return &replicaProc{daemon: startDaemonEnv(r.t, r.bin, nil, args...), idx: i, ip: r.net.ip(2 + i), args: args}
}

// cluster reads a replica's GET /config/ai/cluster.
func (p *replicaProc) cluster() restapi.ClusterView {
	p.t.Helper()
	code, body := p.do(http.MethodGet, "/netlox/v1/config/ai/cluster", "")
	var v restapi.ClusterView
	if code != 200 || json.Unmarshal([]byte(body), &v) != nil {
		p.t.Fatalf("GET cluster on replica %d: %d %s", p.idx, code, body)
	}
	return v
}

// waitMembers waits until every live replica sees n members.
func (r *clusterRig) waitMembers(n int, within time.Duration) {
	r.t.Helper()
	waitUntil(r.t, fmt.Sprintf("every replica sees %d members", n), within, func() bool {
		for _, p := range r.replicas {
			if p.cmd.ProcessState != nil {
				continue
			}
			if v := p.cluster(); v.State != "member" || len(v.Members) != n {
				return false
			}
		}
		return true
	})
}

// ruleBody is the P/D rule over the fleet (Tier 0, Tier 1 and Tier 1.5).
func (r *clusterRig) ruleBody() string {
	r.t.Helper()
	return ruleJSON(r.t, r.fleet, r.vip, r.port, map[string]any{"pd_cache_aware_mode": true, "kvExactMode": 1})
}

// serveRule POSTs the rule on replica p and waits until every replica
// serves it.
func (r *clusterRig) serveRule(p *replicaProc) {
	r.t.Helper()
	if code, body := p.do(http.MethodPost, "/netlox/v1/config/loadbalancer", r.ruleBody()); code != 200 {
		r.t.Fatalf("POST on replica %d: %d %s", p.idx, code, body)
	}
	for _, q := range r.replicas {
		waitUntil(r.t, fmt.Sprintf("replica %d serves the rule", q.idx), 5*time.Second, func() bool {
			return q.chat(r.port, "", "hello").status == 200
		})
	}
}

// rulePath is the rule's REST path.
func (r *clusterRig) rulePath() string {
	return fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp", r.vip, r.port)
}

// chatResult is one chat request through a replica.
type chatResult struct {
	status  int
	tier    string
	prefill int
	err     error
}

// dataClient sends data-plane requests (no keep-alive across replicas'
// restarts matters: each request may open its own connection).
var dataClient = &http.Client{Timeout: 30 * time.Second}

// chat sends one chat turn of conversation conv through replica p.
func (p *replicaProc) chat(port int, conv, content string) chatResult {
	return p.chatN(port, conv, content, 4)
}

// chatN is chat asking for maxTokens tokens.
func (p *replicaProc) chatN(port int, conv, content string, maxTokens int) chatResult {
	body := fmt.Sprintf(`{"model":"sim-model","messages":[{"role":"user","content":%q}],"max_tokens":%d}`, content, maxTokens)
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s:%d/v1/chat/completions", p.ip, port), strings.NewReader(body))
	if err != nil {
		return chatResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if conv != "" {
		req.Header.Set("X-Conversation-Id", conv)
	}
	res, err := dataClient.Do(req)
	if err != nil {
		return chatResult{err: err}
	}
	defer res.Body.Close()
	out := chatResult{status: res.StatusCode, prefill: -1}
	// An answer cut short (its replica killed mid-body) was not served.
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		out.err = fmt.Errorf("reading the answer: %w", err)
	}
	if m := routeRE.FindStringSubmatch(res.Header.Get("X-Llb-Route")); m != nil {
		out.tier = m[1]
		fmt.Sscan(m[2], &out.prefill)
	}
	return out
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
