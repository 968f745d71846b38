package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
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

	mu      sync.Mutex                 // serializes refreshes
	lists   [][]modelEntry             // by endpoint; nil: never read
	refused ladder.EndpointSet         // endpoints that refused a runtime load
	snap    atomic.Pointer[modelsSnap] // what readers see
	svc     atomic.Pointer[actors.Service]

	loadMu sync.Mutex              // guards loads
	loads  map[string]*adapterLoad // runtime loads in progress, by endpoint and adapter
	loaded atomic.Int64            // adapters llb loaded
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
	s := &modelsSnap{served: ladder.NewServedModels(cards).WithRefused(c.refused)}
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

// ensureAdapter implements gateway.Deps.EnsureAdapter: it makes sure
// endpoint ep serves adapter model before a request for it goes there,
// loading it with POST /v1/load_lora_adapter (the path another endpoint's
// card gives as its root) when ep does not list it yet. Concurrent calls
// for the same endpoint and adapter share one load. An endpoint that
// answers 404 (runtime updating off) is not asked again.
func (c *modelCatalog) ensureAdapter(ctx context.Context, ep int, model string) error {
	s := c.served()
	a, ok := s.Adapter(model)
	if !ok || s.Serves(ep, model) || ep < 0 || ep >= len(c.urls) {
		return nil
	}
	key := fmt.Sprintf("%d\x00%s", ep, model)
	c.loadMu.Lock()
	if c.loads == nil {
		c.loads = map[string]*adapterLoad{}
	}
	l := c.loads[key]
	if l == nil {
		l = &adapterLoad{done: make(chan struct{})}
		c.loads[key] = l
		go func() {
			l.err = c.load(ep, model, a.Root)
			c.loadMu.Lock()
			delete(c.loads, key)
			c.loadMu.Unlock()
			close(l.done)
		}()
	}
	c.loadMu.Unlock()
	select {
	case <-l.done:
		return l.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// adapterLoad is one load in progress.
type adapterLoad struct {
	done chan struct{}
	err  error
}

// errRuntimeLoadRefused: the engine does not allow runtime LoRA updating.
var errRuntimeLoadRefused = errors.New("lifecycle: the endpoint refuses to load LoRA adapters at runtime (VLLM_ALLOW_RUNTIME_LORA_UPDATING is off)")

// adapterLoadTimeout bounds one load (vLLM reads the adapter's weights).
const adapterLoadTimeout = 30 * time.Second

// load asks endpoint ep to load adapter name from path, then re-reads its
// list.
func (c *modelCatalog) load(ep int, name, path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), adapterLoadTimeout)
	defer cancel()
	url := strings.TrimSuffix(c.urls[ep], "/v1/models") + "/v1/load_lora_adapter"
	body, _ := json.Marshal(map[string]string{"lora_name": name, "lora_path": path})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("load adapter %s on %s: %w", name, url, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	res.Body.Close()
	switch {
	case res.StatusCode == http.StatusNotFound:
		c.mu.Lock()
		c.refused = c.refused.With(ep)
		c.publish()
		c.mu.Unlock()
		return fmt.Errorf("load adapter %s on %s: %w", name, url, errRuntimeLoadRefused)
	case res.StatusCode == http.StatusOK, bytes.Contains(msg, []byte("already been loaded")):
	default:
		return fmt.Errorf("load adapter %s on %s: status %d: %s", name, url, res.StatusCode, msg)
	}
	c.loaded.Add(1)
	return c.refreshEndpoint(ctx, ep)
}
