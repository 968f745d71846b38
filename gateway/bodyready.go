package gateway

import "bytes"

// ready reports whether a Read of up to room bytes would return at once,
// from the bytes already buffered, without waiting on the connection: the
// relay then takes them into the chunk it is about to write. Behind a
// backend that sends each SSE event as a chunk, a relay that fell behind
// finds many events buffered; written one chunk (one system call) each,
// a loaded llbd spent a write per event where HAProxy, forwarding what it
// read, spent one per read. A chunk's end (its CRLF, the next size line)
// must be buffered whole: a Read that would wait for the rest is left to
// the relay's next turn. The body's last chunk is too (its trailer may not
// be here yet), so the end of a body is never read here.
func (r *bodyReader) ready(room int) bool {
	if r.eof || room <= 0 || r.c.br == nil {
		return false
	}
	n := r.c.br.Buffered()
	if n == 0 {
		return false
	}
	if r.framing != framingChunked {
		return true
	}
	b, _ := r.c.br.Peek(n) // buffered: no read
	left := r.left
	if !r.inChunk {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return false
		}
		size, err := parseChunkSize(b[:i+1])
		if err != nil {
			return true // Read reports it at once
		}
		if size == 0 || i+1 == len(b) {
			return false
		}
		b, left = b[i+1:], size
	}
	if int64(room) < left || int64(len(b)) < left {
		return true // the chunk goes on past what the Read takes
	}
	return bytes.IndexByte(b[left:], '\n') >= 0
}
