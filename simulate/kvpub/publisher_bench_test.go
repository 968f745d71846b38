package kvpub

import (
	"fmt"
	"testing"
	"time"

	"github.com/llbproject/llb/inventory"
)

// BenchmarkPublisher_Publish measures encoding and queueing one batch of one
// BlockStored event (the socket goroutine sends concurrently), by blocks per
// event and layout.
func BenchmarkPublisher_Publish(b *testing.B) {
	for _, layout := range []struct {
		name string
		l    inventory.Layout
	}{{"map", inventory.LayoutMap}, {"array", inventory.LayoutArray}} {
		for _, blocks := range []int{1, 32, 256} {
			b.Run(fmt.Sprintf("layout=%s/blocks=%d", layout.name, blocks), func(b *testing.B) {
				p, err := Start(Config{Endpoint: "tcp://127.0.0.1:*", Layout: layout.l, QueueSize: 1 << 16})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				ev := storedEvent()
				ev.BlockHashes = make([]uint64, blocks)
				ev.TokenIDs = make([]uint32, 16*blocks)
				ev.ExtraKeys = make([]any, blocks)
				evs := []inventory.Event{ev}
				now := time.Now()
				b.ReportAllocs()
				for b.Loop() {
					for p.Publish(now, evs) != nil { // queue full: let the socket goroutine drain
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(p.Stats().Dropped), "dropped")
			})
		}
	}
}
