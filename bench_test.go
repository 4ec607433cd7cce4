package spine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/engine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The benchmarks report medians (p50-*) besides Go's mean ns/op, because the
// machines that run them are shared and noisy. Run them with
//
//	go test -run '^$' -bench . -benchtime 20x .
//
// docs/performance.md records the figures and the command that produced them.

// benchManifest is the benchmarks' tools: suiteManifest's, with lookup
// unchecked (no input schema), so that a tool call costs the bridge alone
// (BenchmarkToolCallChecked adds the check).
func benchManifest() spine.Manifest {
	m := suiteManifest()
	spec := m["lookup"]
	spec.InputSchema = nil
	m["lookup"] = spec
	return m
}

// benchShared returns the benchmarks' shared Runner, of benchManifest.
var benchShared = sharedRunner(benchManifest)

func reportMedian(b *testing.B, samples []time.Duration, unit string) {
	b.Helper()
	if len(samples) == 0 {
		return
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	median := samples[len(samples)/2]
	switch unit {
	case "ms":
		b.ReportMetric(float64(median)/float64(time.Millisecond), "p50-ms")
	default:
		b.ReportMetric(float64(median), "p50-ns")
	}
}

// BenchmarkCompile measures New: compiling the Guest and preparing its image
// without a cache, and loading both from warm on-disk caches.
func BenchmarkCompile(b *testing.B) {
	ctx := context.Background()
	measure := func(b *testing.B, opts func() *spine.Options) {
		var samples []time.Duration
		for i := 0; i < b.N; i++ {
			o := opts()
			start := time.Now()
			r, err := spine.New(ctx, nil, o)
			if err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(start))
			r.Close(ctx)
		}
		reportMedian(b, samples, "ms")
	}
	b.Run("cold", func(b *testing.B) {
		measure(b, func() *spine.Options { return &spine.Options{NoDiskCache: true} })
	})
	b.Run("cached", func(b *testing.B) {
		dir := b.TempDir()
		warm, err := spine.New(ctx, nil, &spine.Options{CacheDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		warm.Close(ctx)
		b.ResetTimer()
		measure(b, func() *spine.Options { return &spine.Options{CacheDir: dir} })
	})
}

// BenchmarkRunDemo is one run of the seed demo with the default options: a
// Guest from the warm pool, reset to the prepared image, and one tool call.
func BenchmarkRunDemo(b *testing.B) {
	r := benchShared(b)
	ctx := context.Background()
	req := spine.Request{Source: "price = lookup(key=\"book\")\nresult = price * inputs[\"quantity\"]\n", Inputs: map[string]any{"quantity": 3}}
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		out, err := r.Run(ctx, req)
		if err != nil || string(out.Value) != "63" {
			b.Fatal(out, err)
		}
		samples = append(samples, time.Since(start))
	}
	reportMedian(b, samples, "ms")
}

// BenchmarkToolCall is the cost of one tool call: inside one run, a loop of
// 1,000 calls of the lookup tool minus the same loop calling a plain Python
// function, both timed by the Guest itself.
func BenchmarkToolCall(b *testing.B) {
	benchmarkToolCall(b, benchShared(b))
}

// BenchmarkToolCallChecked is BenchmarkToolCall with an input schema on
// lookup, so each call's keywords are checked by the proxy first.
func BenchmarkToolCallChecked(b *testing.B) {
	m := benchManifest()
	spec := m["lookup"]
	spec.InputSchema = json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`)
	m["lookup"] = spec
	benchmarkToolCall(b, spinetest.NewRunner(b, m, nil))
}

func benchmarkToolCall(b *testing.B, r *spine.Runner) {
	ctx := context.Background()
	src := `import time
def plain(key):
    return 21
n = 1000
t0 = time.perf_counter_ns()
for _ in range(n):
    lookup(key="book")
t1 = time.perf_counter_ns()
for _ in range(n):
    plain(key="book")
t2 = time.perf_counter_ns()
result = [(t1 - t0) / n, (t2 - t1) / n]
`
	var tool, plain, diff []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, err := r.Run(ctx, spine.Request{Source: src})
		if err != nil {
			b.Fatal(err)
		}
		var ns [2]float64
		if err := json.Unmarshal(out.Value, &ns); err != nil {
			b.Fatal(err)
		}
		tool = append(tool, time.Duration(ns[0]))
		plain = append(plain, time.Duration(ns[1]))
		diff = append(diff, time.Duration(ns[0]-ns[1]))
	}
	reportMedian(b, diff, "ns")
	sort.Slice(tool, func(i, j int) bool { return tool[i] < tool[j] })
	sort.Slice(plain, func(i, j int) bool { return plain[i] < plain[j] })
	b.ReportMetric(float64(tool[len(tool)/2]), "p50-tool-ns")
	b.ReportMetric(float64(plain[len(plain)/2]), "p50-plain-ns")
}

// BenchmarkInstance is the cost of a Guest ready for a run, by start mode:
// from scratch (instantiate, data segments, CPython's start, import
// bootstrap), from the image by copy, and from the image copy-on-write.
func BenchmarkInstance(b *testing.B) {
	ctx := context.Background()
	modes := []engine.StartMode{engine.StartFresh, engine.StartCopy}
	if engine.COWSupported {
		modes = append(modes, engine.StartCOW)
	}
	for _, mode := range modes {
		b.Run(mode.String(), func(b *testing.B) {
			r, err := spine.New(engine.WithStart(ctx, mode), benchManifest(), &spine.Options{PoolSize: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close(ctx)
			var samples []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				inst, err := spine.EngineOf(r).NewInstance(ctx)
				if err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
				inst.Close()
			}
			reportMedian(b, samples, "ms")
		})
	}
}

// BenchmarkRunTools is the cost of a run's own tools (Request.Tools): the
// seed demo run with none and with 20, each with an input schema, one run
// of each in turn on the shared Runner, and the medians of both
// (p50-none-ns, p50-20-ns) and of their difference in each pair
// (p50-extra-ns).
func BenchmarkRunTools(b *testing.B) {
	r := benchShared(b)
	ctx := context.Background()
	tools := spine.Manifest{}
	for i := range 20 {
		tools[fmt.Sprintf("crm.tool_%d", i)] = spine.ToolSpec{
			Call:        func(context.Context, json.RawMessage) (any, error) { return 1, nil },
			Description: "A tool of the caller's.",
			InputSchema: json.RawMessage(`{"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]}`),
		}
	}
	base := spine.Request{Source: "price = lookup(key=\"book\")\nresult = price * inputs[\"quantity\"]\n", Inputs: map[string]any{"quantity": 3}}
	with := base
	with.Tools = tools
	var none, twenty, extra []time.Duration
	run := func(req spine.Request) time.Duration {
		start := time.Now()
		out, err := r.Run(ctx, req)
		if err != nil || string(out.Value) != "63" {
			b.Fatal(out, err)
		}
		return time.Since(start)
	}
	run(base)
	run(with)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, t := run(base), run(with)
		none, twenty, extra = append(none, n), append(twenty, t), append(extra, t-n)
	}
	for _, s := range [][]time.Duration{none, twenty, extra} {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	b.ReportMetric(float64(none[len(none)/2]), "p50-none-ns")
	b.ReportMetric(float64(twenty[len(twenty)/2]), "p50-20-ns")
	b.ReportMetric(float64(extra[len(extra)/2]), "p50-extra-ns")
}

// BenchmarkRecordedRun is BenchmarkRunDemo with and without a record,
// interleaved run by run so that the machine's noise falls on both: the
// medians of each, how much more a recorded run costs, and the size of the
// seed demo's record as Encode writes it.
func BenchmarkRecordedRun(b *testing.B) {
	r := benchShared(b)
	ctx := context.Background()
	req := spine.Request{Source: "price = lookup(key=\"book\")\nresult = price * inputs[\"quantity\"]\n", Inputs: map[string]any{"quantity": 3}}
	plain := make([]time.Duration, 0, b.N)
	recorded := make([]time.Duration, 0, b.N)
	size := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, record := range []bool{i%2 == 0, i%2 != 0} {
			req.Record = record
			start := time.Now()
			out, err := r.Run(ctx, req)
			took := time.Since(start)
			if err != nil || string(out.Value) != "63" || (out.Record != nil) != record {
				b.Fatal(out, err)
			}
			if !record {
				plain = append(plain, took)
				continue
			}
			recorded = append(recorded, took)
			data, err := out.Record.Encode()
			if err != nil {
				b.Fatal(err)
			}
			size = len(data)
		}
	}
	b.StopTimer()
	sort.Slice(plain, func(i, j int) bool { return plain[i] < plain[j] })
	sort.Slice(recorded, func(i, j int) bool { return recorded[i] < recorded[j] })
	p, q := plain[len(plain)/2], recorded[len(recorded)/2]
	b.ReportMetric(float64(p)/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(q)/float64(time.Millisecond), "p50-recorded-ms")
	b.ReportMetric(100*(float64(q)/float64(p)-1), "recorded-%")
	b.ReportMetric(float64(size), "record-bytes")
}
