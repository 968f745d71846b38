package inventory

// #include <malloc.h>
import "C"

// libzmq allocates each received frame with malloc. glibc serves a request
// above its mmap threshold (128 KiB) with its own mapping, returned to the
// system on free, but it raises that threshold to the size of every mapped
// block freed (up to 32 MiB): after one large KV-event frame, later frames
// of up to 32 MiB come from the heap arenas and stay in RSS after they are
// freed. A fixed threshold turns that adjustment off, so the memory of a
// large (or hostile) frame leaves with the frame. Frames under 1 MiB (every
// real vLLM batch) are unaffected.
func init() {
	C.mallopt(C.M_MMAP_THRESHOLD, 1<<20)
}
