package spine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// recorder is a TracerProvider that keeps every span it starts, for the
// tests to read.
type recorder struct {
	noop.TracerProvider
	mu    sync.Mutex
	spans []*recSpan
}

func (p *recorder) Tracer(string, ...trace.TracerOption) trace.Tracer { return &recTracer{p: p} }

// find returns the spans named name.
func (p *recorder) find(name string) []*recSpan {
	p.mu.Lock()
	defer p.mu.Unlock()
	var found []*recSpan
	for _, s := range p.spans {
		if s.name == name {
			found = append(found, s)
		}
	}
	return found
}

type recTracer struct {
	noop.Tracer
	p *recorder
}

func (t *recTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	s := &recSpan{name: name, attrs: map[attribute.Key]attribute.Value{}}
	for _, kv := range cfg.Attributes() {
		s.attrs[kv.Key] = kv.Value
	}
	if parent, ok := trace.SpanFromContext(ctx).(*recSpan); ok {
		s.parent = parent
	}
	t.p.mu.Lock()
	t.p.spans = append(t.p.spans, s)
	t.p.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

type recSpan struct {
	noop.Span
	name   string
	parent *recSpan

	mu     sync.Mutex
	attrs  map[attribute.Key]attribute.Value
	events []string
	status codes.Code
	ended  bool
}

func (s *recSpan) IsRecording() bool { return true }

func (s *recSpan) End(...trace.SpanEndOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
}

func (s *recSpan) AddEvent(name string, _ ...trace.EventOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.events = append(s.events, name)
	}
}

func (s *recSpan) SetStatus(c codes.Code, _ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = c
}

func (s *recSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range kv {
		s.attrs[a.Key] = a.Value
	}
}

func (s *recSpan) snapshot() (events []string, status codes.Code, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events), s.status, s.ended
}

// TestObserveSpans: a run's span, a span for each tool call under it (in
// the ctx the tool gets), and early reads' spans with their claim or
// cancellation, on the real Guest.
func TestObserveSpans(t *testing.T) {
	rec := &recorder{}
	var toolSpan trace.Span
	m := suiteManifest()
	m["traced"] = spine.ToolSpec{Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		toolSpan = trace.SpanFromContext(ctx)
		return 1, nil
	}}
	r := spinetest.NewRunner(t, m, &spine.Options{TracerProvider: rec})
	src := `import _spine, bootstrap
book = b'{"tool":"lookup","args":{"key":"book"}}'
pen = b'{"tool":"lookup","args":{"key":"pen"}}'
claimed = _spine.prepare(book)
unclaimed = _spine.prepare(pen)
assert claimed and unclaimed
value = bootstrap.decode(_spine.resolve(claimed, book))
traced()
try:
    fail()
except RuntimeError:
    pass
result = value
`
	out, err := r.Run(context.Background(), spine.Request{Source: src, EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != "21" {
		t.Fatalf("value %s", out.Value)
	}
	runs := rec.find("spine.run")
	if len(runs) != 1 {
		t.Fatalf("%d run spans", len(runs))
	}
	run := runs[0]
	if _, _, ended := run.snapshot(); !ended || run.attrs["spine.tool_calls"].AsInt64() != 3 || !run.attrs["spine.early_reads"].AsBool() {
		t.Fatalf("run span: ended %v, attributes %v", ended, run.attrs)
	}
	lookups := rec.find("execute_tool lookup")
	if len(lookups) != 2 {
		t.Fatalf("%d lookup spans, want 2 (both early reads)", len(lookups))
	}
	outcome := map[string][]string{}
	for _, s := range lookups {
		events, _, ended := s.snapshot()
		if !ended || s.parent != run || !s.attrs["spine.early_read"].AsBool() || s.attrs["gen_ai.tool.name"].AsString() != "lookup" {
			t.Fatalf("early read span: ended %v, parent %v, attributes %v", ended, s.parent, s.attrs)
		}
		// The cancelled read's tool may return after its cancellation: an
		// outcome is any event of the span, not only its last.
		for _, e := range events {
			if e == "spine.early_read.claimed" || e == "spine.early_read.cancelled" {
				outcome[e] = events
			}
		}
	}
	if len(outcome["spine.early_read.claimed"]) == 0 || len(outcome["spine.early_read.cancelled"]) == 0 {
		t.Fatalf("early read events: %v", outcome)
	}
	traced := rec.find("execute_tool traced")
	if len(traced) != 1 || traced[0].parent != run || traced[0].attrs["spine.early_read"].AsBool() || toolSpan != trace.Span(traced[0]) {
		t.Fatalf("the traced tool's span: %v (the tool's ctx had %v)", traced, toolSpan)
	}
	failed := rec.find("execute_tool fail")
	if len(failed) != 1 {
		t.Fatalf("%d fail spans", len(failed))
	}
	if _, status, _ := failed[0].snapshot(); status != codes.Error {
		t.Fatalf("a failed tool's span has status %v", status)
	}

	// A run that fails marks its span.
	_, err = r.Run(context.Background(), spine.Request{Source: "raise ValueError('no')"})
	spinetest.PythonError(t, err)
	runs = rec.find("spine.run")
	if _, status, _ := runs[len(runs)-1].snapshot(); status != codes.Error || runs[len(runs)-1].attrs["spine.python.exception"].AsString() != "ValueError" {
		t.Fatalf("failed run span: %v %v", status, runs[len(runs)-1].attrs)
	}
}

// TestObserveCalls: Output.Calls records the program's calls in order,
// early or not, failed or not, and at most MaxToolCalls of them.
func TestObserveCalls(t *testing.T) {
	r := spinetest.NewRunner(t, suiteManifest(), &spine.Options{MaxToolCalls: 4})
	src := `import _spine, bootstrap
book = b'{"tool":"lookup","args":{"key":"book"}}'
h = _spine.prepare(book)
bootstrap.decode(_spine.resolve(h, book))
echo(x=1)
for tool in (fail, lookup, lookup):
    try:
        tool(key="none")
    except RuntimeError:
        pass
`
	out, err := r.Run(context.Background(), spine.Request{Source: src, EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	type call struct {
		tool          string
		early, failed bool
	}
	var got []call
	for i, c := range out.Calls {
		got = append(got, call{c.Tool, c.Early, c.Failed})
		if c.Start < 0 || c.Duration < 0 || (i > 0 && !c.Early && c.Start < out.Calls[i-1].Start) {
			t.Fatalf("call %d: start %v, duration %v", i, c.Start, c.Duration)
		}
	}
	// The fifth call is over the budget: it raised, and is not a call.
	want := []call{{"lookup", true, false}, {"echo", false, false}, {"fail", false, true}, {"lookup", false, true}}
	if !slices.Equal(got, want) || out.ToolCalls != 4 {
		t.Fatalf("calls %v (ToolCalls %d), want %v", got, out.ToolCalls, want)
	}
}

// TestObserveApprove: the hook refuses a call, which raises PermissionError
// with its message at the call, and the tool never runs; the outcome is the
// same with early reads on and off, and a refused early read is not started.
func TestObserveApprove(t *testing.T) {
	type asked struct {
		tool, args string
		early      bool
	}
	var mu sync.Mutex
	var questions []asked
	var ran []string
	lookupTool := spinetest.NewTools().Manifest()["lookup"].Call
	m := spine.Manifest{"lookup": {AllowEarlyRead: true, Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		mu.Lock()
		ran = append(ran, string(args))
		mu.Unlock()
		return lookupTool(ctx, args)
	}}}
	approve := func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
		mu.Lock()
		defer mu.Unlock()
		questions = append(questions, asked{tool, string(args), early})
		if strings.Contains(string(args), "pen") {
			return errors.New("pens are not for sale")
		}
		return nil
	}
	r := spinetest.NewRunner(t, m, &spine.Options{Approve: approve})
	src := `book = lookup(key="book")
try:
    lookup(key="pen")
except PermissionError as e:
    refused = str(e)
result = [book, refused]
`
	for _, early := range []bool{false, true} {
		questions, ran = nil, nil
		out, err := r.Run(context.Background(), spine.Request{Source: src, EarlyReads: early})
		if err != nil {
			t.Fatalf("early reads %v: %v", early, err)
		}
		if string(out.Value) != `[21,"pens are not for sale"]` {
			t.Fatalf("early reads %v: value %s", early, out.Value)
		}
		if !slices.Equal(ran, []string{`{"key":"book"}`}) {
			t.Fatalf("early reads %v: the tool ran for %v", early, ran)
		}
		if len(out.Calls) != 2 || out.Calls[0].Failed || !out.Calls[1].Failed || out.Calls[0].Early != early {
			t.Fatalf("early reads %v: calls %+v", early, out.Calls)
		}
		// The program's call of pen asks the hook itself, early reads or not.
		last := questions[len(questions)-1]
		if last != (asked{"lookup", `{"key":"pen"}`, false}) {
			t.Fatalf("early reads %v: the hook was asked %v", early, questions)
		}
		if early {
			// Both reads were proposed early; book was approved once, early.
			want := []asked{{"lookup", `{"key":"book"}`, true}, {"lookup", `{"key":"pen"}`, true}, {"lookup", `{"key":"pen"}`, false}}
			if !slices.Equal(questions, want) {
				t.Fatalf("the hook was asked %v, want %v", questions, want)
			}
		} else if len(questions) != 2 || questions[0].early {
			t.Fatalf("without early reads the hook was asked %v", questions)
		}
	}

	// A hook that panics refuses; the Host goes on.
	r = spinetest.NewRunner(t, m, &spine.Options{Approve: func(context.Context, string, json.RawMessage, bool) error { panic("bad hook") }})
	_, err := r.Run(context.Background(), spine.Request{Source: `lookup(key="book")`})
	if pe := spinetest.PythonError(t, err); pe.Type != "PermissionError" || !strings.Contains(pe.Message, "bad hook") {
		t.Fatalf("%s: %s", pe.Type, pe.Message)
	}
}

// TestObserveLogger: a run's end, a failed tool and a limit reached are
// logged; nothing is without a Logger (the other tests).
func TestObserveLogger(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := spinetest.NewRunner(t, suiteManifest(), &spine.Options{Logger: logger, MaxToolCalls: 1})
	_, err := r.Run(context.Background(), spine.Request{Source: "try:\n    fail()\nexcept RuntimeError:\n    pass\necho()\n"})
	if pe := spinetest.PythonError(t, err); !strings.Contains(pe.Message, "budget") {
		t.Fatal(pe)
	}
	mu.Lock()
	defer mu.Unlock()
	var messages []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatal(err)
		}
		msg := entry["msg"].(string)
		switch msg {
		case "spine: tool failed":
			if entry["tool"] != "fail" || entry["error"] != "boom" {
				t.Fatalf("tool failure logged as %v", entry)
			}
		case "spine: limit reached":
			if entry["limit"] != "MaxToolCalls" {
				t.Fatalf("limit logged as %v", entry)
			}
		case "spine: run ended":
			if entry["tool_calls"] != 1.0 || !strings.Contains(entry["error"].(string), "budget") {
				t.Fatalf("run end logged as %v", entry)
			}
		}
		messages = append(messages, msg)
	}
	want := []string{"spine: run started", "spine: tool failed", "spine: limit reached", "spine: run ended"}
	if !slices.Equal(messages, want) {
		t.Fatalf("logged %q, want %q", messages, want)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
