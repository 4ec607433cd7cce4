package spine

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"
)

// White-box tests of the bridge's cost with the observers: a tool call
// through invoke, with none of them set and with each.

// TestObserveNoCostWhenUnset: with no TracerProvider, Logger or Approve, a
// tool call through the bridge allocates exactly what the tool's own call
// and encoding do (the record's slice, reused here, grows at most
// log2(MaxToolCalls) times in a run).
func TestObserveNoCostWhenUnset(t *testing.T) {
	call := func(ctx context.Context, args json.RawMessage) (any, error) { return 1, nil }
	r := newRunner(t, Manifest{"one": {Call: call}}, &Options{PoolSize: -1})
	st := newRunState(r, context.Background(), false)
	defer st.close()
	request := callRequest{Tool: "one", Args: json.RawMessage(`{}`)}
	bridge := testing.AllocsPerRun(500, func() {
		st.calls, st.record = 0, st.record[:0]
		r.invoke(st.ctx, request)
	})
	tool := testing.AllocsPerRun(500, func() { callTool(st.ctx, request.Tool, call, request.Args) })
	if bridge != tool {
		t.Fatalf("a tool call allocates %v times through the bridge, %v times alone", bridge, tool)
	}
}

// BenchmarkObserveToolCall is one tool call through the bridge, without
// and with each observer (docs/observability.md):
//
//	go test -run '^$' -bench ObserveToolCall -benchmem .
func BenchmarkObserveToolCall(b *testing.B) {
	call := func(ctx context.Context, args json.RawMessage) (any, error) { return 1, nil }
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"unset", Options{}},
		{"noop-tracer", Options{TracerProvider: noop.NewTracerProvider()}},
		{"approve", Options{Approve: func(context.Context, string, json.RawMessage, bool) error { return nil }}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tc.opts.PoolSize = -1
			r := newRunner(b, Manifest{"one": {Call: call}}, &tc.opts)
			st := newRunState(r, context.Background(), false)
			defer st.close()
			request := callRequest{Tool: "one", Args: json.RawMessage(`{}`)}
			b.ReportAllocs()
			for b.Loop() {
				st.calls, st.record = 0, st.record[:0]
				r.invoke(st.ctx, request)
			}
		})
	}
}
