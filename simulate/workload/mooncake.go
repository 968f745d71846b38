package workload

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/llbproject/llb/simulate/tokenizer"
)

// MooncakeBlockTokens is the block size of the Mooncake traces: one hash id
// stands for 512 prompt tokens.
const MooncakeBlockTokens = 512

// Bounds a Mooncake trace line must keep; a line outside them is refused.
const (
	// maxMooncakeLine is the longest line read (a 200k-token prompt has
	// ~400 ids, under 4 KiB).
	maxMooncakeLine = 1 << 20
	// maxMooncakeInput bounds input_length and output_length.
	maxMooncakeInput = 1 << 22
	// maxMooncakeID bounds a hash id.
	maxMooncakeID = math.MaxInt32
)

// ErrTrace reports a recorded trace that cannot be read.
var ErrTrace = errors.New("workload: invalid trace")

// BlockTrace is a recorded request trace in the format of the Mooncake
// traces (kvcache-ai/Mooncake, FAST25-release/traces): per request an
// arrival time, prompt and output lengths, and one hash id per 512-token
// block of the prompt, equal ids meaning the same prefix. It holds no text:
// Mooncake is a Spec that renders each request's prompt from its ids.
type BlockTrace struct {
	// Name labels the trace ("conversation").
	Name string
	// Requests in arrival order.
	Requests []BlockRequest
}

// BlockRequest is one recorded request.
type BlockRequest struct {
	// At is the arrival offset from the trace's first request.
	At time.Duration
	// InputTokens and OutputTokens are input_length and output_length.
	InputTokens, OutputTokens int
	// HashIDs are the prompt's block ids: ceil(InputTokens / 512) of them,
	// the last one for a block that may be partial.
	HashIDs []uint32
}

// mooncakeLine is one line of a Mooncake JSONL trace.
type mooncakeLine struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []int64  `json:"hash_ids"`
}

// ReadMooncake reads a Mooncake JSONL trace (timestamp in milliseconds,
// input_length, output_length, hash_ids), at most limit requests (0: all).
// It refuses a line that is not such an object, a timestamp before the
// previous line's, input_length outside 2..4M or output_length outside 1..4M, a hash_ids list whose length is
// not ceil(input_length/512), and an id that appears at two different
// positions or after two different ids: the replay gives every id one
// 512-token content, so an id must always stand for the same prefix block.
// Errors name the line.
func ReadMooncake(r io.Reader, name string, limit int) (*BlockTrace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxMooncakeLine)
	t := &BlockTrace{Name: name}
	// pos and parent record where each id was first seen: its position and
	// the id before it (-1 at position 0).
	pos := map[uint32]int32{}
	parent := map[uint32]int64{}
	var first, last float64
	line := 0
	for sc.Scan() {
		line++
		raw := sc.Bytes()
		if len(strings.TrimSpace(string(raw))) == 0 {
			continue
		}
		if limit > 0 && len(t.Requests) == limit {
			break
		}
		var l mooncakeLine
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("trace %s line %d: %w: %w", name, line, ErrTrace, err)
		}
		req, err := l.request(len(t.Requests) == 0, last, pos, parent)
		if err != nil {
			return nil, fmt.Errorf("trace %s line %d: %w: %w", name, line, ErrTrace, err)
		}
		if len(t.Requests) == 0 {
			first = *l.Timestamp
		}
		last = *l.Timestamp
		req.At = time.Duration((last - first) * float64(time.Millisecond))
		t.Requests = append(t.Requests, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace %s line %d: %w: %w", name, line+1, ErrTrace, err)
	}
	if len(t.Requests) == 0 {
		return nil, fmt.Errorf("trace %s: no requests: %w", name, ErrTrace)
	}
	return t, nil
}

// request validates one line against the lines before it and converts it.
func (l *mooncakeLine) request(firstLine bool, last float64, pos map[uint32]int32, parent map[uint32]int64) (BlockRequest, error) {
	var errs []error
	switch {
	case l.Timestamp == nil:
		errs = append(errs, errors.New("no timestamp"))
	case !(*l.Timestamp >= 0) || *l.Timestamp > 1e12:
		errs = append(errs, fmt.Errorf("timestamp %v (want 0..1e12 ms)", *l.Timestamp))
	case !firstLine && *l.Timestamp < last:
		errs = append(errs, fmt.Errorf("timestamp %v before the previous line's %v", *l.Timestamp, last))
	}
	in, out := 0, 0
	if l.InputLength == nil || *l.InputLength < 2 || *l.InputLength > maxMooncakeInput {
		// The replayed prompt is a BOS and at least one word of text.
		errs = append(errs, fmt.Errorf("input_length missing or outside 2..%d", maxMooncakeInput))
	} else {
		in = *l.InputLength
	}
	if l.OutputLength == nil || *l.OutputLength < 1 || *l.OutputLength > maxMooncakeInput {
		errs = append(errs, fmt.Errorf("output_length missing or outside 1..%d", maxMooncakeInput))
	} else {
		out = *l.OutputLength
	}
	if in > 0 {
		if want := (in + MooncakeBlockTokens - 1) / MooncakeBlockTokens; len(l.HashIDs) != want {
			errs = append(errs, fmt.Errorf("%d hash_ids for %d input tokens (want %d, one per %d tokens)", len(l.HashIDs), in, want, MooncakeBlockTokens))
		}
	}
	if len(errs) > 0 {
		return BlockRequest{}, errors.Join(errs...)
	}
	ids := make([]uint32, len(l.HashIDs))
	prev := int64(-1)
	for i, id := range l.HashIDs {
		if id < 0 || id > maxMooncakeID {
			return BlockRequest{}, fmt.Errorf("hash id %d (want 0..%d)", id, maxMooncakeID)
		}
		u := uint32(id)
		if p, seen := pos[u]; !seen {
			pos[u], parent[u] = int32(i), prev
		} else if int(p) != i || parent[u] != prev {
			return BlockRequest{}, fmt.Errorf("hash id %d at position %d after %d, first seen at position %d after %d: ids must name one prefix block each", id, i, prev, p, parent[u])
		}
		ids[i] = u
		prev = id
	}
	return BlockRequest{InputTokens: in, OutputTokens: out, HashIDs: ids}, nil
}

// NativeRate is the trace's mean arrival rate in requests per second over
// its span (0 when every request arrives at once).
func (t *BlockTrace) NativeRate() float64 {
	n := len(t.Requests)
	if n < 2 {
		return 0
	}
	span := t.Requests[n-1].At.Seconds()
	if span <= 0 {
		return 0
	}
	return float64(n-1) / span
}

// Mooncake replays a BlockTrace as completion requests. The prompt of a
// request is its hash ids' blocks in order, block k covering prompt tokens
// [512k, 512k+512) and the last one cut to input_length: token o of the
// block of id h is a fixed word chosen by (h, o), so equal ids give equal
// tokens wherever they appear, and a 512-token Mooncake block is 32 blocks
// of llb's (and vLLM's) 16 tokens. The first token of every prompt is the
// BOS the worker prepends to a completion prompt; the text is the other
// input_length − 1 words, one token each. Requests arrive at the trace's
// own times (Recorded), scaled to a run's rate. max_tokens is
// output_length.
type Mooncake struct {
	Options
	// Trace is the recorded trace. Required.
	Trace *BlockTrace
}

// Validate reports a missing or empty trace.
func (m Mooncake) Validate() error {
	if m.Trace == nil || len(m.Trace.Requests) == 0 {
		return fmt.Errorf("mooncake workload: no trace: %w", ErrConfig)
	}
	return nil
}

// UnitArrivals implements Recorded: the trace's arrival offsets in seconds
// multiplied by its native rate, so that the mean rate is 1 request/s and
// a run at rate r compresses the trace's time by r / NativeRate. A trace
// whose requests all arrive at once arrives at 1 request/s.
func (m Mooncake) UnitArrivals() []float64 {
	if m.Trace == nil {
		return nil
	}
	out := make([]float64, len(m.Trace.Requests))
	rate := m.Trace.NativeRate()
	for i, r := range m.Trace.Requests {
		if rate > 0 {
			out[i] = r.At.Seconds() * rate
		} else {
			out[i] = float64(i)
		}
	}
	return out
}

// Source implements Spec. The content does not depend on r.
func (m Mooncake) Source(*rand.Rand) (Source, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	src := &mooncakeSource{spec: m, ids: make([]uint32, tokenizer.NumWords)}
	for k := range src.ids {
		src.ids[k] = tokenizer.Encode(nil, " "+tokenizer.Word(uint64(k)), false)[0]
	}
	return src, nil
}

type mooncakeSource struct {
	spec Mooncake
	next int
	// ids[k] is the token id of " "+tokenizer.Word(k).
	ids []uint32
}

// mooncakeWord is the word (an index for tokenizer.Word) at offset o of
// the block of hash id h: a SplitMix64 finaliser of (h, o).
func mooncakeWord(h uint32, o int) uint64 {
	z := uint64(h)<<32 | uint64(o)
	z += 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return (z ^ z>>31) % uint64(tokenizer.NumWords)
}

// Next implements Source.
func (src *mooncakeSource) Next(*rand.Rand) (Item, error) {
	t := src.spec.Trace
	if src.next >= len(t.Requests) {
		return Item{}, fmt.Errorf("mooncake trace %s has %d requests: %w", t.Name, len(t.Requests), ErrConfig)
	}
	br := &t.Requests[src.next]
	src.next++
	tokens := make([]uint32, br.InputTokens)
	var sb strings.Builder
	sb.Grow(5 * br.InputTokens)
	tokens[0] = tokenizer.BOS
	for p := 1; p < br.InputTokens; p++ {
		w := mooncakeWord(br.HashIDs[p/MooncakeBlockTokens], p%MooncakeBlockTokens)
		tokens[p] = src.ids[w]
		sb.WriteByte(' ')
		sb.WriteString(tokenizer.Word(w))
	}
	body, err := src.spec.completionBody(sb.String(), br.OutputTokens, nil)
	if err != nil {
		return Item{}, err
	}
	return Item{
		Path: PathCompletions, Body: body, OutputTokens: br.OutputTokens, Tokens: tokens,
		Workload: "mooncake", Group: int(br.HashIDs[0]),
	}, nil
}
