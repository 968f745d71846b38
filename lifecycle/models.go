package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// Each endpoint's served models, learned from its GET /v1/models and kept
// fresh: its --served-model-name names (aliases included: one card each),
// and its LoRA adapters (a card whose parent is the base model, whose root
// is the path the adapter was loaded from). The rule's service decides
// among the endpoints serving a request's model (actors.RouteRequest.Model,
// Service.SetServedModels); the gateway folds an adapter's name into the
// Tier-1.5 extra keys and the prefix hash (LoRAOf), and answers GET
// /v1/models with the union of the lists (ModelsBody).

// DefaultModelsRefresh is how often a rule's endpoints' /v1/models are
// re-read. Adapters loaded or unloaded at runtime show within it (and at
// once when llb loads one itself).
const DefaultModelsRefresh = 10 * time.Second

// modelsFetchTimeout bounds one endpoint's /v1/models read.
const modelsFetchTimeout = 2 * time.Second

// modelCatalog is a rule's endpoints' /v1/models lists. Lookups are
// lock-free (an atomic snapshot); refreshes are serialized.
type modelCatalog struct {
	urls   []string
	client *http.Client

	mu    sync.Mutex                 // serializes refreshes
	lists [][]modelEntry             // by endpoint; nil: never read
	snap  atomic.Pointer[modelsSnap] // what readers see
	svc   atomic.Pointer[actors.Service]
}

// modelEntry is one card of an endpoint's list: what routing reads, and
// the card as the engine sent it (for the union answer).
type modelEntry struct {
	card ladder.ModelCard
	raw  json.RawMessage
}

// modelsSnap is an immutable view of the lists.
type modelsSnap struct {
	served *ladder.ServedModels
	// body is the union answer of GET /v1/models: every endpoint's cards
	// in endpoint order, each id once; nil while no list was read.
	body []byte
}

func newModelCatalog(endpoints []rule.CompiledEndpoint, client *http.Client) *modelCatalog {
	c := &modelCatalog{client: client, lists: make([][]modelEntry, len(endpoints))}
	for _, ep := range endpoints {
		c.urls = append(c.urls, "http://"+ep.Addr.String()+"/v1/models")
	}
	c.snap.Store(&modelsSnap{})
	return c
}

// attach makes svc the service the catalog tells of every change, and
// tells it the current lists at once.
func (c *modelCatalog) attach(svc *actors.Service) {
	c.svc.Store(svc)
	if s := c.snap.Load(); s.served != nil && svc != nil {
		svc.SetServedModels(s.served)
	}
}

// loraOf implements gateway.Deps.LoRAOf: the model name itself when an
// endpoint lists it as an adapter, "" for a base model or an unknown name.
func (c *modelCatalog) loraOf(model string) string {
	if _, ok := c.snap.Load().served.Adapter(model); ok {
		return model
	}
	return ""
}

// modelsBody implements gateway.Deps.ModelsBody.
func (c *modelCatalog) modelsBody() []byte { return c.snap.Load().body }

// served returns the current table (nil before the first list).
func (c *modelCatalog) served() *ladder.ServedModels { return c.snap.Load().served }

// run refreshes the catalog until ctx ends: at once, then every interval.
func (c *modelCatalog) run(ctx context.Context, interval time.Duration) {
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

// refresh reads every endpoint's /v1/models at once. An endpoint that
// does not answer keeps its last list (an adapter is not forgotten
// because its engine is briefly down; an endpoint never read counts as
// serving every name).
func (c *modelCatalog) refresh(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := make([][]modelEntry, len(c.urls))
	ok := make([]bool, len(c.urls))
	var wg sync.WaitGroup
	for i, u := range c.urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.fetch(ctx, u)
			fresh[i], ok[i] = l, err == nil
		}()
	}
	wg.Wait()
	changed := false
	for i := range c.lists {
		if ok[i] && !sameEntries(c.lists[i], fresh[i]) {
			c.lists[i], changed = fresh[i], true
		}
	}
	if changed {
		c.publish()
	}
}

// refreshEndpoint re-reads endpoint ep's list at once (after llb loaded an
// adapter there).
func (c *modelCatalog) refreshEndpoint(ctx context.Context, ep int) error {
	l, err := c.fetch(ctx, c.urls[ep])
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !sameEntries(c.lists[ep], l) {
		c.lists[ep] = l
		c.publish()
	}
	return nil
}

// publish builds a new snapshot from the lists (c.mu held) and tells the
// service.
func (c *modelCatalog) publish() {
	cards := make([][]ladder.ModelCard, len(c.lists))
	var body bytes.Buffer
	seen := map[string]bool{}
	read := false
	body.WriteString(`{"object":"list","data":[`)
	for i, l := range c.lists {
		if l == nil {
			continue
		}
		read = true
		cards[i] = make([]ladder.ModelCard, 0, len(l))
		for _, e := range l {
			cards[i] = append(cards[i], e.card)
			if seen[e.card.ID] {
				continue
			}
			if len(seen) > 0 {
				body.WriteByte(',')
			}
			seen[e.card.ID] = true
			body.Write(e.raw)
		}
	}
	body.WriteString("]}")
	s := &modelsSnap{served: ladder.NewServedModels(cards)}
	if read {
		s.body = body.Bytes()
	}
	c.snap.Store(s)
	if svc := c.svc.Load(); svc != nil {
		svc.SetServedModels(s.served)
	}
}

func sameEntries(a, b []modelEntry) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].card != b[i].card || !bytes.Equal(a[i].raw, b[i].raw) {
			return false
		}
	}
	return true
}

// modelList is the part of vLLM's /v1/models answer llb reads.
type modelList struct {
	Data []json.RawMessage `json:"data"`
}

// modelCardWire is one card's routing fields.
type modelCardWire struct {
	ID     string  `json:"id"`
	Root   *string `json:"root"`
	Parent *string `json:"parent"`
}

func (c *modelCatalog) fetch(ctx context.Context, url string) ([]modelEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, modelsFetchTimeout)
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
	out := make([]modelEntry, 0, len(ml.Data))
	for _, raw := range ml.Data {
		var w modelCardWire
		if err := json.Unmarshal(raw, &w); err != nil || w.ID == "" {
			continue
		}
		e := modelEntry{card: ladder.ModelCard{ID: w.ID}, raw: raw}
		if w.Root != nil {
			e.card.Root = *w.Root
		}
		if w.Parent != nil {
			e.card.Parent = *w.Parent
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		// A vLLM server lists at least its model: an empty (or foreign)
		// answer says nothing about what the endpoint serves.
		return nil, fmt.Errorf("%s: no model listed", url)
	}
	return out, nil
}
