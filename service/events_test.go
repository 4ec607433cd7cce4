package service_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
)

// event is one Server-Sent Event.
type event struct{ name, data string }

// events opens a run at url as an event stream and returns its events as
// they arrive (closed at the end of the stream) and the answer's header.
func events(t *testing.T, ctx context.Context, url string, body any) (<-chan event, http.Header) {
	t.Helper()
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan event, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var e event
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				ch <- e
				e = event{}
			case strings.HasPrefix(line, "event: "):
				e.name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				e.data = line[len("data: "):]
			}
		}
	}()
	return ch, resp.Header
}

func text(t *testing.T, e event) string {
	t.Helper()
	var s string
	if err := json.Unmarshal([]byte(e.data), &s); err != nil {
		t.Fatalf("event %s: %v", e.name, err)
	}
	return s
}

// TestRunEvents: with Accept: text/event-stream, output arrives as events
// while the program runs (the gate holds it until the test has the first
// line), then the result.
func TestRunEvents(t *testing.T) {
	ts := newServer(t, nil)
	ch, header := events(t, t.Context(), ts.URL+"/v1/run", run{"source": "import sys\nprint('first')\nprint('oops', file=sys.stderr)\ngate()\nprint('second')\nresult = 7"})
	if ct := header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	got := map[string]string{}
	for got["stdout"] != "first\n" || got["stderr"] != "oops\n" {
		e, ok := <-ch
		if !ok || e.name == "result" {
			t.Fatalf("the stream ended before the output came: %+v, %v", e, got)
		}
		got[e.name] += text(t, e)
	}
	<-tools.Gate.Entered
	tools.Gate.Let()
	var result struct {
		Status int `json:"status"`
		service.Response
	}
	for e := range ch {
		switch e.name {
		case "stdout":
			got["stdout"] += text(t, e)
		case "result":
			if err := json.Unmarshal([]byte(e.data), &result); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got["stdout"] != "first\nsecond\n" || result.Status != 200 || string(result.Value) != "7" || result.Stdout != "first\nsecond\n" || result.Error != nil {
		t.Fatalf("stdout %q, result %+v", got["stdout"], result)
	}

	// A Python error is a result event too, with the status the JSON answer has.
	ch, _ = events(t, t.Context(), ts.URL+"/v1/run", run{"source": "raise ValueError('no')"})
	var last event
	for e := range ch {
		last = e
	}
	if last.name != "result" || !strings.Contains(last.data, `"status":422`) || !strings.Contains(last.data, `"type":"ValueError"`) {
		t.Fatalf("last event %+v", last)
	}
}

// TestRunEventsClientGone: a client that goes away stops its run.
func TestRunEventsClientGone(t *testing.T) {
	ts := newServer(t, &service.Options{Slots: 1})
	ctx, cancel := context.WithCancel(t.Context())
	ch, _ := events(t, ctx, ts.URL+"/v1/run", run{"source": "print('started')\nwhile True:\n    pass"})
	// print writes its text and its newline apart: they may come as two
	// events or one.
	for stdout := ""; stdout != "started\n"; {
		e, ok := <-ch
		if !ok || e.name != "stdout" {
			t.Fatalf("the stream ended or sent another event before the output: %+v, stdout %q", e, stdout)
		}
		if stdout += text(t, e); !strings.HasPrefix("started\n", stdout) {
			t.Fatalf("stdout %q", stdout)
		}
	}
	cancel()
	for range ch {
	}
	spinetest.WaitFor(t, "the run to stop", func() bool { return scrape(t, ts.URL)["spine_runs_in_flight"] == 0 })
	if got := scrape(t, ts.URL)[`spine_runs_total{outcome="canceled"}`]; got != 1 {
		t.Fatalf("canceled runs: %v", got)
	}
	if status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", run{"source": "2"}); status != 200 || string(out.Value) != "2" {
		t.Fatalf("after: %d %+v", status, out)
	}
}

// TestStreamEvents: a streamed program (prefix mode) can be answered as
// events too, while its body still arrives.
func TestStreamEvents(t *testing.T) {
	ts := newServer(t, nil)
	pr, pw := io.Pipe()
	req := streamRequest(t, ts.URL+"/v1/run/stream", pr)
	req.Header.Set("Accept", "text/event-stream")
	go func() {
		io.WriteString(pw, "print('a')\n")
		io.WriteString(pw, "result = 1\n")
		pw.Close()
	}()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var stdout string
	var last string
	for _, block := range strings.Split(strings.TrimSpace(string(body)), "\n\n") {
		name, data, _ := strings.Cut(block, "\ndata: ")
		if name == "event: stdout" {
			stdout += text(t, event{"stdout", data})
		}
		last = block
	}
	if stdout != "a\n" || !strings.HasPrefix(last, "event: result\n") || !strings.Contains(last, `"status":200`) {
		t.Fatalf("%s", body)
	}
}
