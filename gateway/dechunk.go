package gateway

import "bytes"

// dechunk appends to dst the data of the chunks raw holds, and reports
// whether raw is exactly a run of whole chunks of data: each a size line
// (extensions allowed), its data and the CRLF (or LF) after it, the last
// one ending where raw ends. Anything else — a chunk cut off, the last
// chunk (size 0, the body's end), a malformed line — is not dechunked
// (false, dst as it came): it is left to bodyReader, which reads the same
// framing byte for byte and reports its errors. On whole chunks it yields
// what bodyReader's Reads would and leaves it where it was: between chunks.
func dechunk(dst, raw []byte) ([]byte, bool) {
	if len(raw) == 0 {
		return dst, false
	}
	start := len(dst)
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			return dst[:start], false
		}
		size, err := parseChunkSize(raw[:i+1])
		if err != nil || size == 0 {
			return dst[:start], false
		}
		raw = raw[i+1:]
		if int64(len(raw)) < size {
			return dst[:start], false
		}
		dst = append(dst, raw[:size]...)
		raw = raw[size:]
		switch {
		case len(raw) >= 2 && raw[0] == '\r' && raw[1] == '\n':
			raw = raw[2:]
		case len(raw) >= 1 && raw[0] == '\n':
			raw = raw[1:]
		default:
			return dst[:start], false
		}
	}
	return dst, true
}
