package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/service"
)

// ClientTools is the cost of tools the caller answers (service's "tools",
// docs/http.md): a spine serve's Server on a loopback listener, driven by
// an HTTP client in the same process, as an agent's would be.
type ClientTools struct {
	Calls int `json:"calls"` // calls timed of each kind

	// Client is a call of a client tool: from sending its result to
	// reading the next pause, the program's turn between two calls
	// included. GoTool is the same loop with a Go tool, from one call's
	// entry to the next; BareHTTP a POST of the same size to a handler
	// that answers at once, over the same kind of connection.
	Client   Stats `json:"client"`
	GoTool   Stats `json:"go_tool"`
	BareHTTP Stats `json:"bare_http"`

	// PausedRuns runs were paused at once; PausedKiB is the process's RSS
	// they added, per run.
	PausedRuns int     `json:"paused_runs"`
	PausedKiB  float64 `json:"paused_kib"`

	// RunsPerSec are runs/s at concurrency 2 of a run making one call:
	// "client" (a pause and its results: two requests) and "go" (a Go tool,
	// one request).
	RunsPerSec map[string]float64 `json:"runs_per_sec"`

	// Declared is the pooled p50 of an empty run declaring 20 client tools
	// (spine.Request.Tools) and of one declaring none, through the Runner.
	Declared20 Stats `json:"declared_20"`
	DeclaredNo Stats `json:"declared_none"`
}

// clientToolsProgram calls tool n times: t, the client tool, or g, the
// Go tool.
func clientToolsProgram(tool string, n int) string {
	return fmt.Sprintf("for i in range(%d):\n    %s(i)\n", n, tool)
}

// tDecl is the client tool t, as a request declares it.
var tDecl = json.RawMessage(`{"name": "t", "description": "Echo.", "input_schema": {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}}`)

// ctHarness is a Server over a Runner, on loopback, and its client.
type ctHarness struct {
	r      *spine.Runner
	svc    *service.Server
	ts     *httptest.Server
	client *http.Client
	mu     sync.Mutex
	stamps []time.Time // the Go tool g's calls
}

func newCTHarness(ctx context.Context, paused int) (*ctHarness, error) {
	h := &ctHarness{}
	m := manifest()
	m["g"] = spine.ToolSpec{Description: "Echo.", InputSchema: json.RawMessage(`{"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}`), Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		h.mu.Lock()
		h.stamps = append(h.stamps, time.Now())
		h.mu.Unlock()
		return 0, nil
	}}
	r, err := spine.New(ctx, m, nil)
	if err != nil {
		return nil, err
	}
	h.r = r
	h.svc = service.New(r, &service.Options{Slots: 2, MaxPaused: paused + 2})
	h.ts = httptest.NewServer(h.svc)
	h.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	return h, nil
}

func (h *ctHarness) close(ctx context.Context) {
	h.ts.Close()
	h.svc.Close(ctx)
	closeRunner(ctx, h.r)
}

// answer is what the bench reads of a run's answer.
type answer struct {
	Status  string `json:"status"`
	RunID   string `json:"run_id"`
	Pending []struct {
		ID string `json:"id"`
	} `json:"pending"`
	Error *service.Error `json:"error"`
}

func (h *ctHarness) post(path string, body []byte) (answer, error) {
	resp, err := h.client.Post(h.ts.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return a, err
	}
	if a.Error != nil {
		return a, fmt.Errorf("%s: %s", a.Error.Kind, a.Error.Message)
	}
	return a, nil
}

// start starts a run of source declaring the client tool t.
func (h *ctHarness) start(source string) (answer, error) {
	body, _ := json.Marshal(map[string]any{"source": source, "tools": []json.RawMessage{tDecl}})
	return h.post("/v1/run", body)
}

// resultsBody answers a's one pending call.
func resultsBody(a answer) ([]byte, error) {
	if len(a.Pending) != 1 {
		return nil, fmt.Errorf("run %s: status %q with %d pending calls, want 1", a.RunID, a.Status, len(a.Pending))
	}
	return []byte(`{"results": [{"id": "` + a.Pending[0].ID + `", "value": 0}]}`), nil
}

// continueRun answers a run's pauses until it ends, timing each answer
// (into took, when not nil).
func (h *ctHarness) continueRun(a answer, took *[]time.Duration) error {
	for a.Status == "tool_calls" {
		body, err := resultsBody(a)
		if err != nil {
			return err
		}
		begun := time.Now()
		if a, err = h.post("/v1/runs/"+a.RunID+"/tool_results", body); err != nil {
			return err
		}
		if took != nil && a.Status == "tool_calls" { // the last answer is the run's end
			*took = append(*took, time.Since(begun))
		}
	}
	if a.Status != "done" {
		return fmt.Errorf("run %s ended with status %q", a.RunID, a.Status)
	}
	return nil
}

func measureClientTools(ctx context.Context, calls, runs int) (*ClientTools, error) {
	const paused = 32
	h, err := newCTHarness(ctx, paused)
	if err != nil {
		return nil, err
	}
	defer h.close(ctx)
	ct := &ClientTools{Calls: calls, PausedRuns: paused, RunsPerSec: map[string]float64{}}
	if err := h.perCall(ctx, ct); err != nil {
		return nil, err
	}
	if ct.PausedKiB, err = h.pausedMemory(paused); err != nil {
		return nil, err
	}
	if err := h.throughput(ctx, ct, runs); err != nil {
		return nil, err
	}
	ct.Declared20, ct.DeclaredNo, err = declaredCost(ctx, h.r, runs)
	return ct, err
}

// perCall times calls of the client tool, of the Go tool and bare HTTP
// round trips.
func (h *ctHarness) perCall(ctx context.Context, ct *ClientTools) error {
	src := clientToolsProgram("t", ct.Calls+1)
	var client []time.Duration
	for range 2 { // the first warms the connection and the pool
		client = client[:0]
		a, err := h.start(src)
		if err == nil {
			err = h.continueRun(a, &client)
		}
		if err != nil {
			return fmt.Errorf("client tool: %w", err)
		}
	}
	h.stamps = h.stamps[:0]
	if _, err := h.r.Run(ctx, spine.Request{Source: clientToolsProgram("g", ct.Calls+1)}); err != nil {
		return fmt.Errorf("go tool: %w", err)
	}
	var goTool []time.Duration
	for i := 1; i < len(h.stamps); i++ {
		goTool = append(goTool, h.stamps[i].Sub(h.stamps[i-1]))
	}
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"tool_calls","run_id":"run_0","pending":[{"id":"call_1","name":"t","arguments":{"i":1}}]}`)
	}))
	defer bare.Close()
	body := []byte(`{"results": [{"id": "call_1", "value": 0}]}`)
	var rtt []time.Duration
	for range ct.Calls + 10 {
		begun := time.Now()
		resp, err := h.client.Post(bare.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		rtt = append(rtt, time.Since(begun))
	}
	ct.Client, ct.GoTool, ct.BareHTTP = summarize(client), summarize(goTool), summarize(rtt[10:])
	return nil
}

// pausedMemory pauses n runs at once and returns the RSS they add, per run
// in KiB; then it ends them.
func (h *ctHarness) pausedMemory(n int) (float64, error) {
	runtime.GC()
	before := snapMemory()
	var pauses []answer
	for range n {
		a, err := h.start("t(1)")
		if err != nil {
			return 0, fmt.Errorf("paused run: %w", err)
		}
		pauses = append(pauses, a)
	}
	runtime.GC()
	after := snapMemory()
	for _, a := range pauses {
		if err := h.continueRun(a, nil); err != nil {
			return 0, err
		}
	}
	if before.noProc() {
		return 0, nil
	}
	return (after.RSSMiB - before.RSSMiB) * 1024 / float64(n), nil
}

// throughput measures runs/s at concurrency 2 of a run with one call of
// the client tool and of the Go tool.
func (h *ctHarness) throughput(ctx context.Context, ct *ClientTools, runs int) error {
	for _, kind := range []string{"client", "go"} {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			first error
		)
		begun := time.Now()
		for g := range 2 {
			wg.Go(func() {
				for range runs/2 + g*(runs%2) {
					var err error
					if kind == "client" {
						var a answer
						if a, err = h.start("t(1)"); err == nil {
							err = h.continueRun(a, nil)
						}
					} else {
						_, err = h.post("/v1/run", []byte(`{"source": "g(i=1)"}`))
					}
					if err != nil {
						mu.Lock()
						first = cmpOr(first, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		if first != nil {
			return fmt.Errorf("%s tool runs: %w", kind, first)
		}
		ct.RunsPerSec[kind] = float64(runs) / time.Since(begun).Seconds()
	}
	return nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// declaredCost measures pooled runs of an empty program declaring 20 client
// tools and declaring none, runs of each, alternating in blocks.
func declaredCost(ctx context.Context, r *spine.Runner, runs int) (with, without Stats, err error) {
	tools := spine.Manifest{}
	for i := range 20 {
		name := fmt.Sprintf("crm.tool%d", i)
		tools[name] = spine.ToolSpec{Description: "A tool the caller answers.", InputSchema: json.RawMessage(`{"type": "object", "properties": {"q": {"type": "string"}}}`),
			Call: func(context.Context, json.RawMessage) (any, error) { return nil, nil }}
	}
	block := max(1, min(overheadBlock, runs/2))
	var a, b []time.Duration
	for i := 0; len(a) < runs || len(b) < runs; i++ {
		req := spine.Request{Source: "pass"}
		if i/block%2 == 0 {
			req.Tools = tools
		}
		begun := time.Now()
		if _, err := r.Run(ctx, req); err != nil {
			return with, without, err
		}
		took := time.Since(begun)
		switch {
		case i < 2*block: // warm-up: the tool list's first stubs
		case req.Tools != nil && len(a) < runs:
			a = append(a, took)
		case req.Tools == nil && len(b) < runs:
			b = append(b, took)
		}
	}
	return summarize(a), summarize(b), nil
}

// print writes the suite's lines.
func (ct *ClientTools) print(w io.Writer) {
	fmt.Fprintf(w, "\nclient tools over loopback HTTP (a spine serve Server and its client in this process), %d calls of each:\n", ct.Calls)
	row := func(name string, s Stats) {
		fmt.Fprintf(w, "  %-62s p50 %7.3f ms  p99 %7.3f ms\n", name, s.P50, s.P99)
	}
	row("a client tool call (results sent to the next pause read)", ct.Client)
	row("a Go tool call (one call's entry to the next, same loop)", ct.GoTool)
	row("a bare HTTP round trip (same body, a handler answering at once)", ct.BareHTTP)
	fmt.Fprintf(w, "  a client tool call over a Go tool call: +%.3f ms p50; over a bare round trip: +%.3f ms p50 (%.1f×)\n",
		ct.Client.P50-ct.GoTool.P50, ct.Client.P50-ct.BareHTTP.P50, ct.Client.P50/ct.BareHTTP.P50)
	if ct.PausedKiB > 0 {
		fmt.Fprintf(w, "  memory: %d runs paused at once add %.0f KiB of RSS each\n", ct.PausedRuns, ct.PausedKiB)
	}
	fmt.Fprintf(w, "  runs/s at c=2 of a run making one call: client tool %.0f, Go tool %.0f (%.2f×)\n",
		ct.RunsPerSec["client"], ct.RunsPerSec["go"], ct.RunsPerSec["client"]/ct.RunsPerSec["go"])
	fmt.Fprintf(w, "  an empty run declaring 20 client tools: pooled p50 %.3f ms against %.3f ms declaring none: %+.3f ms\n",
		ct.Declared20.P50, ct.DeclaredNo.P50, ct.Declared20.P50-ct.DeclaredNo.P50)
}
