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
	out, used, _ := dechunkPrefix(dst, raw)
	if used == 0 || used < len(raw) {
		return dst, false
	}
	return out, true
}

// dechunkPrefix appends to dst the data of the whole chunks of data at
// raw's start and returns how many bytes of raw they took. cut says that
// what follows them, if anything, is a chunk of data raw's end cut off (its
// size line, data or closing CRLF incomplete), which bytes read next may
// complete; otherwise it is what only bodyReader takes — the last chunk
// (size 0), a malformed line. After used bytes bodyReader would be where
// it was: between chunks.
func dechunkPrefix(dst, raw []byte) (out []byte, used int, cut bool) {
	for used < len(raw) {
		rest := raw[used:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return dst, used, true
		}
		size, err := parseChunkSize(rest[:i+1])
		if err != nil || size == 0 {
			return dst, used, false
		}
		rest = rest[i+1:]
		if int64(len(rest)) < size {
			return dst, used, true
		}
		data := rest[:size]
		rest = rest[size:]
		switch {
		case len(rest) >= 2 && rest[0] == '\r' && rest[1] == '\n':
			rest = rest[2:]
		case len(rest) >= 1 && rest[0] == '\n':
			rest = rest[1:]
		case len(rest) == 0 || len(rest) == 1 && rest[0] == '\r':
			return dst, used, true
		default:
			return dst, used, false
		}
		dst = append(dst, data...)
		used = len(raw) - len(rest)
	}
	return dst, used, true
}
