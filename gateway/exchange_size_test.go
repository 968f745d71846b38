package gateway

import (
	"testing"
	"unsafe"
)

// Every stream holds its exchange for its whole life, so the exchange's
// size is memory per stream: the allocator rounds it up to its size class
// (3 KiB up to 3072 bytes, 4 KiB past it). What only P/D legs and a
// migration's next leg use lives in exchangeSide, allocated when used.
func TestExchange_FitsItsSizeClass(t *testing.T) {
	const sizeClass = 3072
	if n := unsafe.Sizeof(*(*exchange)(nil)); n > sizeClass {
		t.Errorf("exchange is %d bytes, past the %d-byte size class a stream holds", n, sizeClass)
	}
}
