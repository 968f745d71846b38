package gateway

import "github.com/llbproject/llb/actors"

// Responses the engine stores. vLLM keeps a Responses API response (when
// its store is on and the request did not say store:false) in its own
// memory; a later request naming it (previous_response_id, GET
// /v1/responses/{id}) must reach that engine. The answering leg's first
// bytes carry the response's id — the "id" of a whole answer, or of the
// response in a stream's first event (response.created) — and llb pins it
// to the answering endpoint through the ticket (actors.Ticket.Pin) as soon
// as it sees it, before the client has the whole answer.

// maxIDScan bounds how much of an answer is searched for the id: vLLM's
// id comes within the first hundred bytes of a whole response and of the
// stream's first event.
const maxIDScan = 16 << 10

// idScan finds a stored response's id in the bytes of its answer.
type idScan struct {
	on   bool   // still looking
	buf  []byte // bytes seen so far, when the id spans reads
	seen int
}

// start arms the scan for an answer of x with status.
func (s *idScan) start(x *exchange, status int) {
	*s = idScan{buf: s.buf[:0]}
	s.on = x.req.Kind == KindResponses && x.req.Store && status/100 == 2 && !x.rr.Passthrough
}

// write looks for the id in p, the answer's next bytes, and pins it once
// found. It gives up after maxIDScan bytes.
func (s *idScan) write(x *exchange, p []byte) {
	if !s.on || len(p) == 0 {
		return
	}
	b := p
	if len(s.buf) > 0 {
		s.buf = append(s.buf, p...)
		b = s.buf
	}
	if id := responseID(b); id != "" {
		x.ticket.Pin(actors.ResponseKey(id))
		s.on = false
		s.buf = s.buf[:0]
		return
	}
	s.seen += len(p)
	if s.seen >= maxIDScan {
		s.on = false
		s.buf = s.buf[:0]
		return
	}
	if len(s.buf) == 0 {
		s.buf = append(s.buf, p...)
	}
}
