package worker

import (
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// LoRA adapters, as vLLM serves them: every adapter is a model name of its
// own (a /v1/models card whose parent is the base model and whose root is
// the path it was loaded from); --lora-modules loads some at start
// (Config.LoRAs); with VLLM_ALLOW_RUNTIME_LORA_UPDATING (Config.RuntimeLoRA)
// POST /v1/load_lora_adapter {"lora_name","lora_path"} adds one and POST
// /v1/unload_lora_adapter {"lora_name"} removes it. The engine batches at
// most --max-loras adapters at once (engine.Config.MaxLoRAs); the
// vllm:lora_requests_info gauge says which adapters the running and
// waiting requests use (lora_metrics.go).

// loraState is the worker's served adapters.
type loraState struct {
	mu    sync.Mutex
	ids   map[string]int    // adapter name → lora_id (1-based, never reused)
	paths map[string]string // adapter name → lora_path (the card's root)
	order []string          // names in load order (the /v1/models order)
	next  int
}

// init loads the configured adapters (--lora-modules name=path: the path
// is the name here).
func (l *loraState) init(names []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids, l.paths = map[string]int{}, map[string]string{}
	for _, n := range names {
		l.addLocked(n, n)
	}
}

func (l *loraState) addLocked(name, path string) int {
	l.next++
	l.ids[name], l.paths[name] = l.next, path
	l.order = append(l.order, name)
	return l.next
}

// id returns the lora_id of adapter name.
func (l *loraState) id(name string) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id, ok := l.ids[name]
	return id, ok
}

// list returns the served adapters in load order with their paths.
func (l *loraState) list() (names, paths []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.order {
		names, paths = append(names, n), append(paths, l.paths[n])
	}
	return names, paths
}

// nameOf returns the adapter with lora_id id ("" when none).
func (l *loraState) nameOf(id int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for n, i := range l.ids {
		if i == id {
			return n
		}
	}
	return ""
}

// resolveModel checks the requested model and returns the LoRA it names:
// the base model under its name or an alias (also when absent), an
// adapter by its name; anything else is vLLM's 404.
func (w *Worker) resolveModel(m *string) (name string, loraName string, loraID int, rerr *reqError) {
	if m == nil || *m == "" || *m == w.cfg.Model {
		return w.cfg.Model, "", 0, nil
	}
	if slices.Contains(w.cfg.Aliases, *m) {
		return *m, "", 0, nil
	}
	if id, ok := w.loras.id(*m); ok {
		return *m, *m, id, nil
	}
	return "", "", 0, &reqError{status: http.StatusNotFound, msg: "The model `" + *m + "` does not exist."}
}

// loraWire is the body of the adapter admin routes.
type loraWire struct {
	LoRAName *string `json:"lora_name"`
	LoRAPath *string `json:"lora_path"`
}

// handleLoadLoRA serves POST /v1/load_lora_adapter.
func (w *Worker) handleLoadLoRA(rw http.ResponseWriter, r *http.Request) {
	var wire loraWire
	if !w.loraAdmin(rw, r, &wire) {
		return
	}
	if wire.LoRAPath == nil || *wire.LoRAPath == "" {
		writeError(rw, http.StatusBadRequest, "Both 'lora_name' and 'lora_path' must be provided.")
		return
	}
	name := *wire.LoRAName
	l := &w.loras
	l.mu.Lock()
	if _, ok := l.ids[name]; ok {
		l.mu.Unlock()
		writeError(rw, http.StatusBadRequest, "The lora adapter '"+name+"' has already been loaded.")
		return
	}
	l.addLocked(name, *wire.LoRAPath)
	l.mu.Unlock()
	w.log.Info().Str("lora", name).Msg("lora adapter loaded")
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = rw.Write([]byte("Success: LoRA adapter '" + name + "' added successfully."))
}

// handleUnloadLoRA serves POST /v1/unload_lora_adapter.
func (w *Worker) handleUnloadLoRA(rw http.ResponseWriter, r *http.Request) {
	var wire loraWire
	if !w.loraAdmin(rw, r, &wire) {
		return
	}
	name := *wire.LoRAName
	l := &w.loras
	l.mu.Lock()
	if _, ok := l.ids[name]; !ok {
		l.mu.Unlock()
		writeError(rw, http.StatusNotFound, "The lora adapter '"+name+"' cannot be found.")
		return
	}
	delete(l.ids, name)
	delete(l.paths, name)
	l.order = slices.DeleteFunc(l.order, func(n string) bool { return n == name })
	l.mu.Unlock()
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = rw.Write([]byte("Success: LoRA adapter '" + name + "' removed successfully."))
}

// loraAdmin checks and reads an adapter admin request; false when it has
// been answered.
func (w *Worker) loraAdmin(rw http.ResponseWriter, r *http.Request, wire *loraWire) bool {
	if !w.cfg.RuntimeLoRA {
		writeError(rw, http.StatusNotFound, "Not Found")
		return false
	}
	var body []byte
	if r.Body != nil {
		b := make([]byte, 0, 512)
		buf := make([]byte, 512)
		for len(b) < 64<<10 {
			n, err := r.Body.Read(buf)
			b = append(b, buf[:n]...)
			if err != nil {
				break
			}
		}
		body = b
	}
	if rerr := decodeBody(body, wire); rerr != nil {
		writeError(rw, rerr.status, rerr.msg)
		return false
	}
	if wire.LoRAName == nil || *wire.LoRAName == "" {
		writeError(rw, http.StatusBadRequest, "Both 'lora_name' and 'lora_path' must be provided.")
		return false
	}
	return true
}

// modelCards is the worker's /v1/models list: the base model under each
// served name, then every adapter.
func (w *Worker) modelCards() []modelCard {
	created := w.started.Unix()
	maxLen := w.cfg.Engine.MaxModelLen
	var cards []modelCard
	for _, n := range append([]string{w.cfg.Model}, w.cfg.Aliases...) {
		cards = append(cards, modelCard{ID: n, Object: "model", Created: created, OwnedBy: "vllm", Root: w.cfg.Model, MaxModelLen: maxLen, Permission: []any{}})
	}
	names, paths := w.loras.list()
	for i, n := range names {
		parent := w.cfg.Model
		cards = append(cards, modelCard{ID: n, Object: "model", Created: created, OwnedBy: "vllm", Root: paths[i], Parent: &parent, MaxModelLen: maxLen, Permission: []any{}})
	}
	return cards
}

// loraInfo renders vllm:lora_requests_info: one sample (value: the time
// of the last change, as vLLM's gauge) naming the adapters of the running
// and waiting requests and max_lora.
func loraInfo(model string, running, waiting []string, maxLoRA int, at float64) string {
	sort.Strings(running)
	sort.Strings(waiting)
	var b strings.Builder
	b.WriteString("# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n")
	b.WriteString("vllm:lora_requests_info{max_lora=")
	b.WriteString(labelValue(strconv.Itoa(maxLoRA)))
	b.WriteString(",model_name=" + labelValue(model))
	b.WriteString(",running_lora_adapters=" + labelValue(strings.Join(running, ",")))
	b.WriteString(",waiting_lora_adapters=" + labelValue(strings.Join(waiting, ",")))
	b.WriteString("} ")
	b.WriteString(strconv.FormatFloat(at, 'f', -1, 64))
	b.WriteByte('\n')
	return b.String()
}

