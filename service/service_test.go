package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// runner is shared by every test: each test makes its own Server (slots,
// limits, metrics) over it.
var (
	tools  = spinetest.NewTools()
	runner *spine.Runner
)

func TestMain(m *testing.M) {
	spinetest.Main(m, &runner, tools.Manifest(), nil)
}

func newServer(t *testing.T, opts *service.Options) *httptest.Server {
	t.Helper()
	return spinetest.ServeHTTP(t, service.New(runner, opts))
}

// post sends body to url and decodes the answer.
func post(t *testing.T, ctx context.Context, url string, body any) (int, service.Response, http.Header) {
	t.Helper()
	var data []byte
	switch b := body.(type) {
	case string:
		data = []byte(b)
	case []byte:
		data = b
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return do(t, req)
}

// streamRequest returns a POST of body, a program, to url with the
// Content-Type a client of /v1/run/stream sends.
func streamRequest(t *testing.T, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/x-python")
	return req
}

func do(t *testing.T, req *http.Request) (int, service.Response, http.Header) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out service.Response
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: status %d, body %q: %v", req.Method, req.URL, resp.StatusCode, raw, err)
	}
	if resp.Close { // net/http's client takes "Connection: close" out of the header
		resp.Header.Set("Connection", "close")
	}
	return resp.StatusCode, out, resp.Header
}

type run map[string]any

func TestRun(t *testing.T) {
	ts := newServer(t, nil)
	status, out, header := post(t, t.Context(), ts.URL+"/v1/run", run{
		"source": "print('hi')\nresult = lookup(key='book') * inputs['quantity']",
		"inputs": map[string]any{"quantity": 3},
	})
	if status != 200 || string(out.Value) != "63" || out.Stdout != "hi\n" || out.ToolCalls != 1 || out.Error != nil {
		t.Fatalf("status %d, %+v", status, out)
	}
	if len(out.Calls) != 1 || out.Calls[0].Tool != "lookup" || out.Calls[0].Early || out.Calls[0].Failed {
		t.Errorf("calls %+v", out.Calls)
	}
	if ct := header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if out.Timing.RunMS <= 0 || out.Timing.TotalMS < out.Timing.RunMS {
		t.Errorf("timing %+v", out.Timing)
	}

	// Early reads, no inputs, the last expression as the value, a tool error caught.
	status, out, _ = post(t, t.Context(), ts.URL+"/v1/run", run{
		"source":      "a = lookup(key='pen')\ntry:\n    lookup(key='unicorn')\nexcept RuntimeError as e:\n    print(e)\n{'a': a, 'n': len(inputs)}",
		"early_reads": true,
		"timeout_ms":  60000,
	})
	if status != 200 || string(out.Value) != `{"a":2,"n":0}` || out.Stdout != "no such key: \"unicorn\"\n" {
		t.Fatalf("status %d, %+v", status, out)
	}
}

func TestConcurrentClients(t *testing.T) {
	const clients, each = 4, 8
	ts := newServer(t, &service.Options{Slots: clients})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				n := c*100 + i
				status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{
					"source": "result = [inputs['n'], lookup(key='book')]",
					"inputs": map[string]any{"n": n},
				})
				if want := fmt.Sprintf("[%d,21]", n); status != 200 || string(out.Value) != want {
					t.Errorf("client %d run %d: status %d, %s, want %s (%+v)", c, i, status, out.Value, want, out.Error)
				}
			}
		})
	}
	wg.Wait()
	metrics := scrape(t, ts.URL)
	if got := metrics[`spine_runs_total{outcome="ok"}`]; got != clients*each {
		t.Errorf("spine_runs_total ok = %v, want %d", got, clients*each)
	}
	if got := metrics[`spine_errors_total{kind="overloaded"}`]; got != 0 {
		t.Errorf("overloaded = %v with a client per slot", got)
	}
}

func TestPythonError(t *testing.T) {
	ts := newServer(t, nil)
	status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "print('before')\nx = 1\ny = x / 0\n"})
	if status != http.StatusUnprocessableEntity || out.Error == nil {
		t.Fatalf("status %d, %+v", status, out)
	}
	e := out.Error
	if e.Kind != "python" || e.Type != "ZeroDivisionError" || e.Line != 3 || !strings.Contains(e.Traceback, `File "<agent>", line 3`) || !strings.Contains(e.Message, "division by zero") {
		t.Errorf("error %+v", e)
	}
	if string(out.Value) != "null" || out.Stdout != "before\n" {
		t.Errorf("value %s, stdout %q", out.Value, out.Stdout)
	}
	if got := scrape(t, ts.URL)[`spine_errors_total{kind="python"}`]; got != 1 {
		t.Errorf("spine_errors_total python = %v", got)
	}
}

func TestBadRequest(t *testing.T) {
	ts := newServer(t, nil)
	for _, tc := range []struct{ name, body string }{
		{"not JSON", `result = 1`},
		{"empty body", ``},
		{"unknown field", `{"source": "1", "sauce": "2"}`},
		{"missing source", `{"inputs": {}}`},
		{"empty source", `{"source": ""}`},
		{"source not a string", `{"source": 1}`},
		{"inputs an array", `{"source": "1", "inputs": [1]}`},
		{"inputs a string", `{"source": "1", "inputs": "{}"}`},
		{"negative timeout", `{"source": "1", "timeout_ms": -1}`},
		{"two values", `{"source": "1"} {"source": "2"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", tc.body)
			if status != 400 || out.Error == nil || out.Error.Kind != "bad_request" || out.Error.Message == "" {
				t.Errorf("status %d, %+v", status, out.Error)
			}
		})
	}
	resp, err := http.Get(ts.URL + "/v1/run")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/run: %d", resp.StatusCode)
	}
}

func TestTooLarge(t *testing.T) {
	ts := newServer(t, nil)
	source := "x = '" + strings.Repeat("a", 1<<20) + "'"
	status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": source})
	if status != http.StatusRequestEntityTooLarge || out.Error == nil || out.Error.Kind != "too_large" {
		t.Fatalf("status %d, %+v", status, out.Error)
	}
	// Just under the cap the body is read, and the Runner's own limit on the
	// source answers.
	ts = newServer(t, &service.Options{MaxBody: 3 << 20})
	status, out, _ = post(t, t.Context(), ts.URL+"/v1/run", run{"source": source + strings.Repeat(" ", 1<<20)})
	if status != http.StatusRequestEntityTooLarge || out.Error == nil || out.Error.Kind != "too_large" {
		t.Fatalf("source over the Runner's limit: status %d, %+v", status, out.Error)
	}
}

func TestTimeout(t *testing.T) {
	ts := newServer(t, nil)
	// Long enough for the print on a busy machine; the loop never ends.
	status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "print('looping')\nwhile True:\n    pass", "timeout_ms": 2000})
	if status != http.StatusRequestTimeout || out.Error == nil || out.Error.Kind != "timeout" || out.Stdout != "looping\n" {
		t.Fatalf("status %d, %+v, stdout %q", status, out.Error, out.Stdout)
	}
	// The server's cap wins over a longer timeout_ms.
	ts = newServer(t, &service.Options{MaxTimeout: 50 * time.Millisecond})
	status, out, _ = post(t, t.Context(), ts.URL+"/v1/run", run{"source": "import time\ntime.sleep(3600)", "timeout_ms": 3600_000})
	if status != http.StatusRequestTimeout || out.Error == nil || out.Error.Kind != "timeout" {
		t.Fatalf("server cap: status %d, %+v", status, out.Error)
	}
	if got := scrape(t, ts.URL)[`spine_runs_total{outcome="timeout"}`]; got != 1 {
		t.Errorf("spine_runs_total timeout = %v", got)
	}
}

// startSlow starts a run of source that goes on until its client cancels
// it, and returns once the program has begun (it calls gate(wait=False)
// first); cancel ends it and waits for the client's error.
func startSlow(t *testing.T, url string, source string) (cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		data, _ := json.Marshal(run{"source": "gate(wait=False)\n" + source})
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/run", bytes.NewReader(data))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("the slow run answered: %d %s", resp.StatusCode, body)
		}
		done <- err
	}()
	select {
	case <-tools.Gate.Entered:
	case err := <-done:
		t.Fatalf("the slow run ended before it began: %v", err)
	}
	return func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("slow run: %v", err)
		}
	}
}

func TestOverload(t *testing.T) {
	ts := newServer(t, &service.Options{Slots: 1})
	cancel := startSlow(t, ts.URL, "import time\ntime.sleep(3600)")
	status, out, header := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "1"})
	if status != http.StatusTooManyRequests || out.Error == nil || out.Error.Kind != "overloaded" || header.Get("Retry-After") == "" {
		t.Fatalf("second run: status %d, %+v, Retry-After %q", status, out.Error, header.Get("Retry-After"))
	}
	// Streams are admitted the same way.
	req := streamRequest(t, ts.URL+"/v1/run/stream", strings.NewReader("1"))
	if status, out, _ := do(t, req); status != http.StatusTooManyRequests || out.Error.Kind != "overloaded" {
		t.Fatalf("stream: status %d, %+v", status, out.Error)
	}
	cancel()
	spinetest.WaitFor(t, "the slot to be free", func() bool { return scrape(t, ts.URL)["spine_runs_in_flight"] == 0 })
	if status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "1"}); status != 200 || string(out.Value) != "1" {
		t.Fatalf("after the slow run: status %d, %+v", status, out)
	}
	if got := scrape(t, ts.URL)[`spine_errors_total{kind="overloaded"}`]; got != 2 {
		t.Errorf("overloaded = %v, want 2", got)
	}
}

func TestClientCancel(t *testing.T) {
	ts := newServer(t, &service.Options{Slots: 1, MaxTimeout: time.Hour})
	// A busy loop: only the run's context can stop it.
	cancel := startSlow(t, ts.URL, "n = 0\nwhile True:\n    n += 1")
	cancel()
	// The handler frees the slot only when Run has returned: the run stopped.
	spinetest.WaitFor(t, "the run to stop", func() bool { return scrape(t, ts.URL)["spine_runs_in_flight"] == 0 })
	metrics := scrape(t, ts.URL)
	if metrics[`spine_runs_total{outcome="canceled"}`] != 1 || metrics[`spine_errors_total{kind="canceled"}`] != 1 {
		t.Errorf("canceled runs %v, errors %v", metrics[`spine_runs_total{outcome="canceled"}`], metrics[`spine_errors_total{kind="canceled"}`])
	}
	if status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "2"}); status != 200 || string(out.Value) != "2" {
		t.Fatalf("after the canceled run: status %d, %+v", status, out)
	}
}

func TestStream(t *testing.T) {
	ts := newServer(t, nil)
	tools.DrainLookups()
	pr, pw := io.Pipe()
	req := streamRequest(t, ts.URL+`/v1/run/stream?inputs={"quantity":3}`, pr)
	type answer struct {
		status int
		out    service.Response
	}
	answers := make(chan answer, 1)
	go func() {
		status, out, _ := do(t, req)
		answers <- answer{status, out}
	}()
	// The first statement is complete once the next one starts: prefix mode
	// starts the early read of lookup(key='book') before the program is whole.
	if _, err := io.WriteString(pw, "price = lookup(key='book')\nprint('streamed')\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case key := <-tools.Lookups:
		if key != "book" {
			t.Fatalf("early read of %q", key)
		}
	case a := <-answers:
		t.Fatalf("answered before the program ended: %+v", a)
	}
	for _, chunk := range []string{"result = price", " * inputs['quantity']", "\n"} {
		if _, err := io.WriteString(pw, chunk); err != nil {
			t.Fatal(err)
		}
	}
	pw.Close()
	a := <-answers
	if a.status != 200 || string(a.out.Value) != "63" || a.out.Stdout != "streamed\n" || a.out.ToolCalls != 1 {
		t.Fatalf("status %d, %+v", a.status, a.out)
	}

	// Settings in headers instead of the query string; a Python error.
	req = streamRequest(t, ts.URL+"/v1/run/stream", strings.NewReader("x = inputs['n']\nraise ValueError(x)\n"))
	req.Header.Set("Spine-Inputs", `{"n": "boom"}`)
	req.Header.Set("Spine-Timeout-Ms", "60000")
	status, out, _ := do(t, req)
	if status != 422 || out.Error == nil || out.Error.Type != "ValueError" || out.Error.Message != "boom" || out.Error.Line != 2 {
		t.Fatalf("headers: status %d, %+v", status, out.Error)
	}
}

func TestStreamErrors(t *testing.T) {
	ts := newServer(t, nil)
	for _, query := range []string{"inputs=[1]", "inputs={", "timeout_ms=soon", "timeout_ms=-5", "early_reads=maybe"} {
		req := streamRequest(t, ts.URL+"/v1/run/stream?"+query, strings.NewReader("1"))
		if status, out, _ := do(t, req); status != 400 || out.Error.Kind != "bad_request" {
			t.Errorf("%s: status %d, %+v", query, status, out.Error)
		}
	}

	// A program over the body cap, streamed.
	pr, pw := io.Pipe()
	go func() {
		line := "# " + strings.Repeat("x", 1000) + "\n"
		for written := 0; written <= 1<<20; written += len(line) {
			if _, err := io.WriteString(pw, line); err != nil {
				return // the server stopped reading
			}
		}
		pw.Close()
	}()
	req := streamRequest(t, ts.URL+"/v1/run/stream", pr)
	status, out, _ := do(t, req)
	pr.Close()
	if status != http.StatusRequestEntityTooLarge || out.Error.Kind != "too_large" {
		t.Errorf("large stream: status %d, %+v", status, out.Error)
	}

	// A client that stops writing mid-program: its time limit ends the run,
	// and the server answers even though the body never ended.
	pr, pw = io.Pipe()
	req = streamRequest(t, ts.URL+"/v1/run/stream?timeout_ms=50", pr)
	go io.WriteString(pw, "x = 1\n")
	status, out, _ = do(t, req)
	pw.Close()
	if status != http.StatusRequestTimeout || out.Error.Kind != "timeout" {
		t.Errorf("stalled stream: status %d, %+v", status, out.Error)
	}
	spinetest.WaitFor(t, "the slot to be free", func() bool { return scrape(t, ts.URL)["spine_runs_in_flight"] == 0 })
}

func TestHealthz(t *testing.T) {
	ts := newServer(t, &service.Options{Slots: 3})
	resp, err := http.Get(ts.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Status    string
		Slots     int
		SlotsBusy int `json:"slots_busy"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != 200 || h.Status != "ok" || h.Slots != 3 || h.SlotsBusy != 0 {
		t.Fatalf("status %d, %+v, %v", resp.StatusCode, h, err)
	}
}

func TestMetrics(t *testing.T) {
	ts := newServer(t, &service.Options{Slots: 2})
	post(t, t.Context(), ts.URL+"/v1/run", run{"source": "result = lookup(key='book') + lookup(key='pen')"})
	post(t, t.Context(), ts.URL+"/v1/run", run{"source": "1/0"})
	post(t, t.Context(), ts.URL+"/v1/run", `{`)

	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
	}
	for _, want := range []string{
		"# TYPE spine_runs_total counter",
		"# TYPE spine_run_duration_seconds histogram",
		`spine_run_duration_seconds_bucket{outcome="ok",le="+Inf"} 1`,
		`spine_run_duration_seconds_count{outcome="python"} 1`,
		"# TYPE spine_pool_ready gauge",
		"# TYPE spine_instances_made_total counter",
		"go_goroutines ",
	} {
		if !bytes.Contains(text, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	metrics := spinetest.ParseMetrics(t, text)
	for name, want := range map[string]float64{
		`spine_runs_total{outcome="ok"}`:         1,
		`spine_runs_total{outcome="python"}`:     1,
		`spine_runs_total{outcome="timeout"}`:    0,
		`spine_tool_calls_total`:                 2,
		`spine_errors_total{kind="python"}`:      1,
		`spine_errors_total{kind="bad_request"}`: 1,
		`spine_errors_total{kind="overloaded"}`:  0,
		`spine_errors_total{kind="too_large"}`:   0,
		`spine_errors_total{kind="timeout"}`:     0,
		`spine_errors_total{kind="guest"}`:       0,
		`spine_runs_in_flight`:                   0,
		`spine_slots`:                            2,
		`spine_pool_size`:                        float64(runner.Stats().PoolSize),
	} {
		if got, ok := metrics[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if metrics["spine_instances_made_total"] < 1 || metrics["spine_runner_runs_started_total"] < 2 {
		t.Errorf("instances made %v, runs started %v", metrics["spine_instances_made_total"], metrics["spine_runner_runs_started_total"])
	}
	if _, ok := metrics["spine_pool_ready"]; !ok {
		t.Error("no spine_pool_ready")
	}
}

// scrape returns the samples of GET url/metrics by name with labels.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	return spinetest.Metrics(t, url, "")
}

// TestDeepInputs: inputs the Guest could not decode are refused with a 400
// that names the limit, not run and failed as the Guest's fault.
func TestDeepInputs(t *testing.T) {
	ts := newServer(t, nil)
	deep := json.RawMessage(strings.Repeat("[", spine.MaxInputDepth) + strings.Repeat("]", spine.MaxInputDepth))
	status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "1", "inputs": map[string]any{"a": deep}})
	if status != http.StatusBadRequest || out.Error == nil || out.Error.Kind != "bad_request" ||
		!strings.Contains(out.Error.Message, fmt.Sprint(spine.MaxInputDepth)) {
		t.Fatalf("status %d, %+v", status, out.Error)
	}
	status, out, _ = post(t, t.Context(), ts.URL+"/v1/run", run{"source": "len(str(inputs))", "inputs": map[string]any{"a": json.RawMessage("[[1]]")}})
	if status != http.StatusOK {
		t.Fatalf("shallow inputs: status %d, %+v", status, out.Error)
	}
}
