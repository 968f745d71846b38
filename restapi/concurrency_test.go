package restapi

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// TestConcurrentWriters_AllAcceptedAndPersisted runs POSTs, GETs and DELETEs
// at once (meant for -race): every write is accepted exactly once, and the
// state file ends up holding what the API lists.
func TestConcurrentWriters_AllAcceptedAndPersisted(t *testing.T) {
	dir := t.TempDir()
	ts := started(t, func(c *Config) { c.StateDir = dir })
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan string, 3*n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if r := ts.post(single(t).Set("serviceArguments.port", 4000+i).JSON(t)); r.status != 200 {
				errs <- fmt.Sprintf("POST %d: %d %s", i, r.status, r.body)
			}
			if i%3 == 0 {
				if r := ts.do(http.MethodDelete, fmt.Sprintf("%s/externalipaddress/127.0.0.1/port/%d/protocol/tcp", lbPath, 4000+i), ""); r.status != 200 {
					errs <- fmt.Sprintf("DELETE %d: %d %s", i, r.status, r.body)
				}
			}
		}()
		go func() {
			defer wg.Done()
			if r := ts.do(http.MethodGet, lbPath+"/all", ""); r.status != 200 {
				errs <- fmt.Sprintf("GET: %d", r.status)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	listed := ts.all()
	if len(listed) != n-n/3 {
		t.Fatalf("rules: got %d; want %d", len(listed), n-n/3)
	}
	restarted := started(t, func(c *Config) { c.StateDir = dir })
	if got := restarted.all(); mustJSON(t, got) != mustJSON(t, listed) {
		t.Errorf("state file and API disagree after concurrent writes")
	}
}
