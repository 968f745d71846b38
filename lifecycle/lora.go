package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/llbproject/llb/rule"
)

// LoRA adapters: vLLM serves an adapter under its own model name, and
// hashes every KV block of such a request with the adapter's name as an
// extra key. To recompute those hashes (and to keep an adapter's prefix
// hash apart from the base model's) llb must know which model names are
// adapters. The engines say so in GET /v1/models: an adapter's card has a
// non-null "parent" (the base model).

// DefaultLoRARefresh is how often a rule's adapter list is re-read.
const DefaultLoRARefresh = 30 * time.Second

// loraCatalog is a rule's set of LoRA adapter names, refreshed from the
// engines' /v1/models. Lookups are lock-free (an atomic snapshot).
type loraCatalog struct {
	urls   []string
	client *http.Client
	names  atomic.Pointer[map[string]struct{}]
}

func newLoRACatalog(endpoints []rule.CompiledEndpoint, client *http.Client) *loraCatalog {
	c := &loraCatalog{client: client}
	for _, ep := range endpoints {
		c.urls = append(c.urls, "http://"+ep.Addr.String()+"/v1/models")
	}
	empty := map[string]struct{}{}
	c.names.Store(&empty)
	return c
}

// loraOf implements Deps.LoRAOf: the model name itself when it names
// an adapter, "" for a base model or an unknown name.
func (c *loraCatalog) loraOf(model string) string {
	if _, ok := (*c.names.Load())[model]; ok {
		return model
	}
	return ""
}

// run refreshes the catalog until ctx ends: at once, then every interval.
func (c *loraCatalog) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		c.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh reads /v1/models from the first engine that answers. A failure
// keeps the last known list (adapters are not forgotten because an engine
// is briefly down).
func (c *loraCatalog) refresh(ctx context.Context) {
	for _, u := range c.urls {
		names, err := c.fetch(ctx, u)
		if err == nil {
			c.names.Store(&names)
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// modelList is the part of vLLM's /v1/models answer llb reads.
type modelList struct {
	Data []struct {
		ID     string  `json:"id"`
		Parent *string `json:"parent"`
	} `json:"data"`
}

func (c *loraCatalog) fetch(ctx context.Context, url string) (map[string]struct{}, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d", url, res.StatusCode)
	}
	var ml modelList
	if err := json.NewDecoder(io.LimitReader(res.Body, 4<<20)).Decode(&ml); err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	names := make(map[string]struct{})
	for _, m := range ml.Data {
		if m.Parent != nil && *m.Parent != "" && *m.Parent != m.ID {
			names[m.ID] = struct{}{}
		}
	}
	return names, nil
}
