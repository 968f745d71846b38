package engine

// runHeap orders running requests by next event time, then ticket.
type runHeap struct{ items []*seqState }

// Len implements heap.Interface.
func (h *runHeap) Len() int { return len(h.items) }

// Less implements heap.Interface.
func (h *runHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if !a.nextAt.Equal(b.nextAt) {
		return a.nextAt.Before(b.nextAt)
	}
	return a.t < b.t
}

// Swap implements heap.Interface, keeping heapIdx current.
func (h *runHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].heapIdx = i
	h.items[j].heapIdx = j
}

// Push implements heap.Interface.
func (h *runHeap) Push(x any) {
	s := x.(*seqState)
	s.heapIdx = len(h.items)
	h.items = append(h.items, s)
}

// Pop implements heap.Interface.
func (h *runHeap) Pop() any {
	n := len(h.items) - 1
	s := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	s.heapIdx = -1
	return s
}
