package worker

import (
	"sync"
	"time"
)

// KVReceipt records kv_transfer_params a worker received and what it did
// with them (shown by /_sim/debug and Worker.Debug).
type KVReceipt struct {
	// RequestID is the request's X-Request-Id.
	RequestID string `json:"x_request_id"`
	// DoRemoteDecode and DoRemotePrefill are the received flags.
	DoRemoteDecode  bool `json:"do_remote_decode"`
	DoRemotePrefill bool `json:"do_remote_prefill"`
	// RemoteEngineID is the prefill engine the params name.
	RemoteEngineID string `json:"remote_engine_id,omitempty"`
	// RemoteRequestID is the prefill request the params name.
	RemoteRequestID string `json:"remote_request_id,omitempty"`
	// RemoteBlockIDs are the block ids of KV group 0.
	RemoteBlockIDs []int `json:"remote_block_ids,omitempty"`
	// RemoteHost and RemotePort are the prefill's side channel.
	RemoteHost string `json:"remote_host,omitempty"`
	RemotePort int    `json:"remote_port,omitempty"`
	// Pulled is set when the blocks were read from the prefill side.
	Pulled bool `json:"pulled"`
	// PulledBlocks is how many blocks were read.
	PulledBlocks int `json:"pulled_blocks"`
	// PullError says why a pull failed (the request was then prefilled
	// locally).
	PullError string `json:"pull_error,omitempty"`
	// At is when the params arrived (RFC 3339, UTC).
	At string `json:"at"`
}

// newReceipt starts a receipt for kv (the pull fills in its outcome).
func newReceipt(rid string, kv *kvParams) KVReceipt {
	rec := KVReceipt{RequestID: rid, DoRemoteDecode: kv.DoRemoteDecode, DoRemotePrefill: kv.DoRemotePrefill, At: time.Now().UTC().Format(time.RFC3339Nano)}
	if kv.RemoteEngineID != nil {
		rec.RemoteEngineID = *kv.RemoteEngineID
	}
	if kv.RemoteRequestID != nil {
		rec.RemoteRequestID = *kv.RemoteRequestID
	}
	if kv.RemoteHost != nil {
		rec.RemoteHost = *kv.RemoteHost
	}
	if kv.RemotePort != nil {
		rec.RemotePort = *kv.RemotePort
	}
	rec.RemoteBlockIDs, _ = kv.blockIDs() // a bad list shows up as a pull error
	return rec
}

// receiptLog keeps the last kv_transfer_params a worker received.
type receiptLog struct {
	mu    sync.Mutex
	items []KVReceipt
	max   int
}

// add appends a receipt, forgetting the oldest past max.
func (l *receiptLog) add(r KVReceipt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.items) == l.max {
		copy(l.items, l.items[1:])
		l.items = l.items[:len(l.items)-1]
	}
	l.items = append(l.items, r)
}

// list copies the receipts, oldest first.
func (l *receiptLog) list() []KVReceipt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]KVReceipt(nil), l.items...)
}
