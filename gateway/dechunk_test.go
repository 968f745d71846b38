package gateway

import (
	"bytes"
	"io"
	"net"
	"testing"
)

func TestDechunk_WholeChunksOnly(t *testing.T) {
	for _, tc := range []struct {
		name, raw, want string
		ok              bool
	}{
		{"one chunk", "5\r\nhello\r\n", "hello", true},
		{"two chunks", "5\r\nhello\r\n1\r\n!\r\n", "hello!", true},
		{"an extension", "5;x=y\r\nhello\r\n", "hello", true},
		{"bare LF", "5\nhello\n", "hello", true},
		{"upper-case hex", "A\r\n0123456789\r\n", "0123456789", true},
		{"empty", "", "", false},
		{"a size line cut off", "5\r\nhello\r\n1", "", false},
		{"data cut off", "5\r\nhel", "", false},
		{"the CRLF cut off", "5\r\nhello\r", "", false},
		{"the CRLF missing", "5\r\nhello", "", false},
		{"the last chunk", "5\r\nhello\r\n0\r\n\r\n", "", false},
		{"the last chunk alone", "0\r\n\r\n", "", false},
		{"data longer than its size", "3\r\nhello\r\n", "", false},
		{"not hex", "zz\r\nhello\r\n", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := dechunk([]byte("pre"), []byte(tc.raw))
			if ok != tc.ok || string(got) != "pre"+tc.want {
				t.Errorf("dechunk(%q) = %q, %v; want %q, %v", tc.raw, got, ok, "pre"+tc.want, tc.ok)
			}
		})
	}
}

// readerConn is a net.Conn reading from r.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// FuzzDechunk_MatchesTheBodyReader: whatever dechunk takes, bodyReader reads
// the same bytes from it and is then between chunks, not at the body's end
// — the stream poller's step and the relay read one framing the same way.
func FuzzDechunk_MatchesTheBodyReader(f *testing.F) {
	for _, s := range []string{"5\r\nhello\r\n", "5\r\nhello\r\n1\r\n!\r\n", "5;a\nhello\n", "3\r\nhello\r\n", "0\r\n\r\n", "1\r\nx\r\n0\r\n\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := dechunk(nil, raw)
		if !ok {
			if len(got) != 0 {
				t.Fatalf("dechunk(%q) refused but appended %q", raw, got)
			}
			return
		}
		c := &upConn{nc: readerConn{r: bytes.NewReader(raw)}}
		r := bodyReader{c: c, framing: framingChunked}
		var want []byte
		buf := make([]byte, 7)
		for c.reader().Buffered() > 0 || len(want) == 0 || r.inChunk {
			n, err := r.Read(buf)
			want = append(want, buf[:n]...)
			if err != nil {
				t.Fatalf("bodyReader on %q: %v after %q (dechunk: %q)", raw, err, want, got)
			}
			if n == 0 && c.reader().Buffered() == 0 && !r.inChunk {
				break
			}
		}
		if !bytes.Equal(got, want) || r.inChunk || r.eof {
			t.Fatalf("raw %q: dechunk %q, bodyReader %q (in a chunk %v, at the end %v)", raw, got, want, r.inChunk, r.eof)
		}
	})
}
