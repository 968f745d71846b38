package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/llbproject/llb/inventory"
)

// LoxiLB's own CI publisher (loxilb-inference-gateway
// cicd/vllm-kvcache-routing-cpu/kv_event_publisher.py) in front of the real
// daemon: it binds the worker's KV port and sends, per prompt block, one
// batch [time.time(), [event], None] on topic "kv" whose event is the
// 9-element legacy array ["BlockStored", [u64], parent_u64, tokens, 16,
// None, "gpu", None, None] — lower-case medium, block 0's parent named by
// NONE_HASH's key — repeated until the subscriber has them (its --repeat).
// Before issue 14 the feed connected, every event arrived, and the mirror
// stayed at 0 blocks without a word; now the blocks are mirrored and Tier
// 1.5 routes the prompt.

// pyMsgpack writes the msgpack subset Python's msgpack.packb produces for
// these values.
type pyMsgpack struct{ b []byte }

func (p *pyMsgpack) arr(n int) *pyMsgpack {
	if n < 16 {
		p.b = append(p.b, 0x90|byte(n))
	} else {
		p.b = binary.BigEndian.AppendUint16(append(p.b, 0xdc), uint16(n))
	}
	return p
}

func (p *pyMsgpack) str(s string) *pyMsgpack {
	p.b = append(append(p.b, 0xa0|byte(len(s))), s...) // fixstr: every string here is short
	return p
}

func (p *pyMsgpack) uint(v uint64) *pyMsgpack {
	switch {
	case v < 128:
		p.b = append(p.b, byte(v))
	case v <= math.MaxUint8:
		p.b = append(p.b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		p.b = binary.BigEndian.AppendUint16(append(p.b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		p.b = binary.BigEndian.AppendUint32(append(p.b, 0xce), uint32(v))
	default:
		p.b = binary.BigEndian.AppendUint64(append(p.b, 0xcf), v)
	}
	return p
}

func (p *pyMsgpack) null() *pyMsgpack { p.b = append(p.b, 0xc0); return p }

func (p *pyMsgpack) float(f float64) *pyMsgpack {
	p.b = binary.BigEndian.AppendUint64(append(p.b, 0xcb), math.Float64bits(f))
	return p
}

// loxilbStoredBatch is one emit() of a BlockStored.
func loxilbStoredBatch(hash, parent uint64, tokens []uint32) []byte {
	p := (&pyMsgpack{}).arr(3).float(float64(time.Now().UnixNano()) / 1e9).arr(1).
		arr(9).str("BlockStored").arr(1).uint(hash).uint(parent).arr(len(tokens))
	for _, t := range tokens {
		p.uint(uint64(t))
	}
	return p.uint(16).null().str("gpu").null().null().null().b
}

func TestE2E_LoxiLBCIPublisherLowercaseGPUFillsTheMirror(t *testing.T) {
	f := startPDFleet(t, fleetSpec{
		prefill: 1, decode: 1, timeScale: 0.2,
		rule: map[string]any{"kvWarmupSec": 1},
		// The publisher, not the worker, owns the prefill worker's KV port.
		prefillSpec: func(s *procSpec) { s.KVEvents = false },
	})
	pub, err := zmq.NewSocket(zmq.PUB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.SetLinger(0); _ = pub.Close() })
	if err := pub.Bind(fmt.Sprintf("tcp://%s:%d", f.prefill[0].spec.IP, chaosKVPort)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "llbd's feed to connect to the publisher", 15*time.Second, func() bool {
		return f.metrics().sum("loxilb_kv_subscriber_connected", `ep_idx="0"`) == 1
	})
	waitWarm(t, f)

	// The publisher tokenizes the prompt (here: the worker's /tokenize,
	// which llbd uses too) and hashes it with vLLM's sha256_cbor, seed "0".
	prompt := strings.Repeat("The lowercase gpu medium of LoxiLB's CI publisher must not be dropped. ", 8)
	body, _ := json.Marshal(map[string]any{"model": "sim-model", "prompt": prompt})
	res, err := http.Post("http://"+f.prefill[0].addr()+"/tokenize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var tok struct{ Tokens []uint32 }
	err = json.NewDecoder(res.Body).Decode(&tok)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	h, err := inventory.NewHasher(inventory.AlgoSHA256CBOR, 16, "0")
	if err != nil {
		t.Fatal(err)
	}
	digs, err := h.AppendDigests(nil, inventory.Digest{}, 0, tok.Tokens, inventory.ExtraKeys{})
	if err != nil || len(digs) < 4 {
		t.Fatalf("%d blocks, %v; want a few", len(digs), err)
	}
	seq := uint64(0)
	publish := func() {
		parent := h.NoneHash().Key()
		for i, d := range digs {
			if _, err := pub.SendMessage([]byte("kv"), binary.BigEndian.AppendUint64(nil, seq), loxilbStoredBatch(d.Key(), parent, tok.Tokens[i*16:(i+1)*16])); err != nil {
				t.Fatal(err)
			}
			seq++
			parent = d.Key()
		}
	}
	blocks := func() int {
		if eps := f.status(); eps[0].InventoryBlocks != nil {
			return *eps[0].InventoryBlocks
		}
		return -1
	}
	waitUntil(t, "the mirror to hold the published blocks", 15*time.Second, func() bool {
		publish() // the CI publisher's --repeat: a late subscriber misses the first pass
		return blocks() == len(digs)
	})
	ep := f.status()[0]
	if len(ep.KVIgnored) != 0 {
		t.Fatalf("events ignored: %+v", ep.KVIgnored)
	}
	outcome, detail, hdr := ask(loadClient(1), f.vip, prompt, 2, false, 25*time.Second)
	if outcome != outOK {
		t.Fatalf("request: %s %s", outcome, detail)
	}
	route := hdr.Get("X-Llb-Route")
	want := fmt.Sprintf("kv_predicted=%d", min(len(digs), (len(tok.Tokens)-1)/16)*16)
	if !strings.HasPrefix(route, "tier=1.5 prefill=0") || !strings.Contains(route, want) {
		t.Fatalf("route %q; want Tier 1.5 on the endpoint the publisher announced, %s", route, want)
	}
	t.Logf("LoxiLB's CI publisher (medium \"gpu\"): %d blocks mirrored, nothing ignored; %s", len(digs), route)
}
