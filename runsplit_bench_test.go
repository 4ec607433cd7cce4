package spine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/engine"
	"github.com/spine-run/spine/internal/seed"
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
	request, err := r.encodeExecute(Request{}, "", []byte("{}"), guestRunTools{}, false, false)
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

// BenchmarkRunDemoAgainstBare measures issue 35's two other ratios on the
// seed demo's program (a lookup tool answering 21):
//
//	go test -run '^$' -bench RunDemoAgainstBare -benchtime 10x .
//
// The bare side runs on Guests of the same Runner taken outside its pool and
// never reset (the same image, bridge and tool): latency at concurrency 1 in
// b.N rounds of 20 runs of each side, alternating (bare-µs, pooled-µs and
// their ratio), then runs per second with two goroutines, each side in turn
// b.N times 100 runs per goroutine (bare-c2/s, pooled-c2/s, c2-ratio: pooled
// over bare), and the process's CPU time per run there (bare-c2-cpu-µs,
// pooled-c2-cpu-µs, c2-cpu-ratio: bare over pooled). With both cores busy the
// CPU ratio is the runs/s ratio, less the time other processes took the cores
// from one side more than the other (they still slow both through the caches).
func BenchmarkRunDemoAgainstBare(b *testing.B) {
	ctx := context.Background()
	r, err := New(ctx, Manifest{"lookup": {Call: seed.Lookup, AllowEarlyRead: true}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	src := "price = lookup(key=\"book\")\nresult = price * inputs[\"quantity\"]\n"
	inputs, err := r.CheckInputs(map[string]any{"quantity": 3})
	if err != nil {
		b.Fatal(err)
	}
	request, err := r.encodeExecute(Request{}, src, inputs, guestRunTools{}, false, false)
	if err != nil {
		b.Fatal(err)
	}
	var bare [2]*engine.Instance
	for i := range bare {
		if bare[i], err = r.engine.NewInstance(ctx); err != nil {
			b.Fatal(err)
		}
		defer bare[i].Close()
	}
	bareRun := func(g *engine.Instance) {
		st := newRunState(r, ctx, false)
		out, err := g.Execute(g.Begin(st.ctx, nil), request, 1<<20)
		g.End()
		if err != nil || !strings.HasPrefix(string(out), `{"value":63`) {
			b.Fatalf("%s, %v", out, err)
		}
	}
	pooledRun := func(*engine.Instance) {
		out, err := r.Run(ctx, Request{Source: src, Inputs: map[string]any{"quantity": 3}})
		if err != nil || string(out.Value) != "63" {
			b.Fatalf("%v, %v", out, err)
		}
	}
	sides := []func(*engine.Instance){bareRun, pooledRun}
	for _, run := range sides { // warm-up
		for i := 0; i < 30; i++ {
			run(bare[0])
		}
	}
	var times [2][]time.Duration
	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		for side, run := range sides {
			for i := 0; i < 20; i++ {
				start := time.Now()
				run(bare[0])
				times[side] = append(times[side], time.Since(start))
			}
		}
	}
	var perSecond, cpu [2]float64
	for round := 0; round < b.N; round++ {
		for side, run := range sides {
			start, startCPU := time.Now(), processCPU()
			var wg sync.WaitGroup
			for _, g := range bare {
				wg.Go(func() {
					for i := 0; i < 100; i++ {
						run(g)
					}
				})
			}
			wg.Wait()
			perSecond[side] += 200 / time.Since(start).Seconds()
			cpu[side] += float64(processCPU()-startCPU) / 200 / 1e3
		}
	}
	var p50 [2]float64
	for side := range times {
		slices.Sort(times[side])
		p50[side] = float64(times[side][len(times[side])/2]) / 1e3
	}
	b.ReportMetric(p50[0], "bare-µs")
	b.ReportMetric(p50[1], "pooled-µs")
	b.ReportMetric(p50[1]/p50[0], "ratio")
	b.ReportMetric(perSecond[0]/float64(b.N), "bare-c2/s")
	b.ReportMetric(perSecond[1]/float64(b.N), "pooled-c2/s")
	b.ReportMetric(perSecond[1]/perSecond[0], "c2-ratio")
	b.ReportMetric(cpu[0]/float64(b.N), "bare-c2-cpu-µs")
	b.ReportMetric(cpu[1]/float64(b.N), "pooled-c2-cpu-µs")
	b.ReportMetric(cpu[0]/cpu[1], "c2-cpu-ratio")
}

// BenchmarkRunDemoTwoAtOnce is the pooled side of RunDemoAgainstBare's two at
// once alone, b.N runs in all, for a CPU or allocation profile of it
// (docs/performance.md, "Where an empty run's time goes"):
//
//	go test -run '^$' -bench RunDemoTwoAtOnce -benchtime 16000x -cpuprofile cpu.prof .
//	go tool pprof -top -cum -focus 'Runner..Run$' spine.test cpu.prof
func BenchmarkRunDemoTwoAtOnce(b *testing.B) {
	ctx := context.Background()
	r, err := New(ctx, Manifest{"lookup": {Call: seed.Lookup, AllowEarlyRead: true}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	src := "price = lookup(key=\"book\")\nresult = price * inputs[\"quantity\"]\n"
	run := func() {
		out, err := r.Run(ctx, Request{Source: src, Inputs: map[string]any{"quantity": 3}})
		if err != nil || string(out.Value) != "63" {
			b.Fatalf("%v, %v", out, err)
		}
	}
	for i := 0; i < 50; i++ {
		run()
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Go(func() {
			for i := g; i < b.N; i += 2 {
				run()
			}
		})
	}
	wg.Wait()
}

// BenchmarkRunDemoTwoAtOnceSplit splits the pooled run's extra CPU time two at
// once (docs/performance.md, "Where an empty run's time goes"):
//
//	go test -run '^$' -bench RunDemoTwoAtOnceSplit -benchtime 10x .
//
// Two goroutines run the seed demo 100 times each, b.N times for each of four
// sides in turn: the bare Guests of RunDemoAgainstBare (bare), the same
// Guests each reset after every run (reset), the engine's part of a pooled
// run, Acquire, execute and Release, with the request encoded once (engine),
// and Runner.Run (run). The metrics are the process's CPU time per run
// (-cpu-µs) and the ratio of bare to run.
func BenchmarkRunDemoTwoAtOnceSplit(b *testing.B) {
	ctx := context.Background()
	r, err := New(ctx, Manifest{"lookup": {Call: seed.Lookup, AllowEarlyRead: true}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	src := "price = lookup(key=\"book\")\nresult = price * inputs[\"quantity\"]\n"
	inputs, err := r.CheckInputs(map[string]any{"quantity": 3})
	if err != nil {
		b.Fatal(err)
	}
	request, err := r.encodeExecute(Request{}, src, inputs, guestRunTools{}, false, false)
	if err != nil {
		b.Fatal(err)
	}
	var bare [2]*engine.Instance
	for i := range bare {
		if bare[i], err = r.engine.NewInstance(ctx); err != nil {
			b.Fatal(err)
		}
		defer bare[i].Close()
	}
	execute := func(g *engine.Instance) {
		st := newRunState(r, ctx, false)
		out, err := g.Execute(g.Begin(st.ctx, nil), request, 1<<20)
		g.End()
		if err != nil || !strings.HasPrefix(string(out), `{"value":63`) {
			b.Fatalf("%s, %v", out, err)
		}
	}
	names := []string{"bare", "reset", "engine", "run"}
	sides := []func(*engine.Instance){
		execute,
		func(g *engine.Instance) {
			execute(g)
			if err := g.Reset(); err != nil {
				b.Fatal(err)
			}
		},
		func(*engine.Instance) {
			g, err := r.engine.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			execute(g)
			r.engine.Release(g, true)
		},
		func(*engine.Instance) {
			out, err := r.Run(ctx, Request{Source: src, Inputs: map[string]any{"quantity": 3}})
			if err != nil || string(out.Value) != "63" {
				b.Fatalf("%v, %v", out, err)
			}
		},
	}
	for _, run := range sides { // warm-up
		for i := 0; i < 30; i++ {
			run(bare[0])
		}
	}
	cpu := make([]time.Duration, len(sides))
	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		for side, run := range sides {
			start := processCPU()
			var wg sync.WaitGroup
			for _, g := range bare {
				wg.Go(func() {
					for i := 0; i < 100; i++ {
						run(g)
					}
				})
			}
			wg.Wait()
			cpu[side] += processCPU() - start
		}
	}
	for side, name := range names {
		b.ReportMetric(float64(cpu[side])/float64(200*b.N)/1e3, name+"-cpu-µs")
	}
	b.ReportMetric(float64(cpu[0])/float64(cpu[3]), "cpu-ratio")
}
