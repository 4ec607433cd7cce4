package spine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/engine"
)

// BenchmarkRunEmptySplit splits an empty program's pooled run
// (docs/performance.md, "Where an empty run's time goes"):
//
//	go test -run '^$' -bench RunEmptySplit -benchtime 15x .
//
// In b.N rounds of 20 runs of each kind, alternating: the bare host (a Guest
// started from scratch and warmed as the image is, run again and again
// without a reset: bare-µs), Runner.Run (run-µs), and the engine's part of
// it alone — Acquire, execute, Release, which resets (engine-µs) — of which
// the execute (execute-µs). The metrics are the p50s.
func BenchmarkRunEmptySplit(b *testing.B) {
	ctx := context.Background()
	r, err := New(ctx, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	be, err := engine.New(ctx, engine.Config{Wasm: guest.Wasm, StdlibZip: guest.StdlibZip,
		MemoryLimit: 256 << 20, MaxOutput: 1 << 20, MaxDescriptors: 64, Start: engine.StartFresh, Bridge: abi.Host{}})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close(ctx)
	bare, err := be.NewInstance(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer bare.Close()
	request, err := r.encodeExecute(Request{}, "", []byte("{}"), nil, false, false)
	if err != nil {
		b.Fatal(err)
	}
	execute := func(g *engine.Instance, req []byte) time.Duration {
		start := time.Now()
		out, err := g.Execute(g.Begin(ctx, nil), req, 1<<20)
		d := time.Since(start)
		g.End()
		if err != nil || string(out) != `{"value":null}` {
			b.Fatalf("%s, %v", out, err)
		}
		return d
	}
	execute(bare, []byte(`{"source":"import json, re, math, datetime, collections, itertools, functools, ast\nimport asyncio, concurrent.futures.thread\nasyncio.run(asyncio.sleep(0))\nimport plm\nplm.warm()\n","inputs":{},"tools":[],"early_reads":false,"result_limit":1048576}`))
	var bareT, runT, engineT, executeT []time.Duration
	kinds := []func(){
		func() { bareT = append(bareT, execute(bare, request)) },
		func() {
			start := time.Now()
			if _, err := r.Run(ctx, Request{}); err != nil {
				b.Fatal(err)
			}
			runT = append(runT, time.Since(start))
		},
		func() {
			start := time.Now()
			g, err := r.engine.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			executeT = append(executeT, execute(g, request))
			r.engine.Release(g, true)
			engineT = append(engineT, time.Since(start))
		},
	}
	for _, kind := range kinds { // warm-up
		for i := 0; i < 30; i++ {
			kind()
		}
	}
	bareT, runT, engineT, executeT = nil, nil, nil, nil
	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		for _, kind := range kinds {
			for i := 0; i < 20; i++ {
				kind()
			}
		}
	}
	for name, times := range map[string][]time.Duration{"bare-µs": bareT, "run-µs": runT, "engine-µs": engineT, "execute-µs": executeT} {
		slices.Sort(times)
		b.ReportMetric(float64(times[len(times)/2])/1e3, name)
	}
}
