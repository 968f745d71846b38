package inventory

import "fmt"

// Bounds on one drain body's shape, checked before any of it is decoded:
// decoding costs more memory than the body's bytes (an event 120 bytes, a
// block 48, a token or a hash 16), and a body of nothing but "{}," or "1,"
// is that cost at every second or third byte.
const (
	// DefaultDrainMaxEvents bounds the events of one drain. TensorRT-LLM's
	// ring holds kv_cache_config.event_buffer_max_size events per
	// attention-DP rank and llb drains it every 50 ms at most.
	DefaultDrainMaxEvents = 1 << 17
	// DefaultDrainMaxElements bounds the array elements inside a drain's
	// events (blocks, tokens, block hashes): about the tokens of a
	// DefaultDrainMaxBody drain of trtllm-serve's JSON.
	DefaultDrainMaxElements = 1 << 21
	// maxDrainDepth bounds the nesting of a drain's JSON (trtllm-serve's
	// is 6 deep; a multimodal block's mm_keys add a few levels).
	maxDrainDepth = 32
)

// splitDrain checks the shape of a drain body — a JSON array of at most
// maxEvents values, holding at most maxElements array elements and nested
// at most maxDrainDepth deep — and hands each event's JSON (a slice of
// body) to visit, when set, as it goes: check the shape with a nil visit
// first. It returns the number of events. body must be valid JSON
// (json.Valid): strings are skipped by their quotes alone. It allocates
// nothing.
func splitDrain(body []byte, maxEvents, maxElements int, visit func(event []byte)) (int, error) {
	var arrays [maxDrainDepth]bool // per open container: is it an array
	depth, events, elements, start := 0, 0, 0, -1
	end := func(i int) {
		if start >= 0 && visit != nil {
			visit(body[start:i])
		}
		start = -1
	}
	pending := false // just after '[' or an array's ',': a value may start
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		if depth == 0 && c != '[' {
			return events, fmt.Errorf("a drain is a JSON array of events, not a value starting %q: %w", c, ErrMalformed)
		}
		if pending && c != ']' {
			if depth == 1 {
				if events++; events > maxEvents {
					return events, fmt.Errorf("a drain of more than %d events: %w", maxEvents, ErrMalformed)
				}
				start = i
			} else if elements++; elements > maxElements {
				return events, fmt.Errorf("a drain of more than %d array elements (blocks, tokens, block hashes): %w", maxElements, ErrMalformed)
			}
		}
		pending = false
		switch c {
		case '"':
			for i++; i < len(body) && body[i] != '"'; i++ {
				if body[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			if depth == maxDrainDepth {
				return events, fmt.Errorf("a drain nested deeper than %d: %w", maxDrainDepth, ErrMalformed)
			}
			arrays[depth] = c == '['
			depth++
			pending = c == '['
		case ']', '}':
			if depth == 0 {
				return events, fmt.Errorf("a drain closes more than it opens: %w", ErrMalformed)
			}
			depth--
			if depth == 0 {
				end(i)
				return events, nil
			}
		case ',':
			if depth == 1 {
				end(i)
			}
			pending = depth > 0 && arrays[depth-1]
		}
	}
	return events, fmt.Errorf("a drain that does not end: %w", ErrMalformed)
}
