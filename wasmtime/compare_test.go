package wasmtime

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/bench"
	"github.com/spine-run/spine/internal/seed"
)

// TestCompare measures the Guest on wasmtime against the Guest on wazero, in
// one process, alternating in blocks: the seed demo and an empty program
// (Spine's pooled run on wazero, the bare wazero host, a wasmtime Guest with
// its reset, and one without), two runs at once, and the compute suite.
// make wasmtime-compare runs it (SPINE_WASMTIME_COMPARE=1; runs per kind in
// SPINE_COMPARE_RUNS, 300 by default).
func TestCompare(t *testing.T) {
	if os.Getenv("SPINE_WASMTIME_COMPARE") == "" {
		t.Skip("a measurement: SPINE_WASMTIME_COMPARE=1 runs it (make wasmtime-compare)")
	}
	runs := 300
	if n, err := strconv.Atoi(os.Getenv("SPINE_COMPARE_RUNS")); err == nil && n > 0 {
		runs = n
	}
	ctx := context.Background()
	r, err := spine.New(ctx, spine.Manifest{"lookup": {Call: seed.Lookup, AllowEarlyRead: true,
		Description: "Look up the price of an item by key."}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	bareRun, bareClose, err := bench.NewBareRun(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bareClose(ctx)
	testEngine(t)
	g, bare := newGuest(t), newGuest(t)
	pool := newTestPool(t, 2)
	defer pool.drain()

	const seedSource = "price = lookup(key=\"book\")\nresult = price * inputs[\"quantity\"]\n"
	var resets []time.Duration
	seedRequest := spine.Request{Source: seedSource, Inputs: map[string]any{"quantity": 3}}
	kinds := []kind{
		{name: "seed demo, Spine pooled (wazero)", run: func() error { return expectRun(r.Run(ctx, seedRequest))("63") }},
		{name: "seed demo, wasmtime Guest + reset", run: wasmtimeRun(g, seedSource, "63", &resets)},
		{name: "seed demo, wasmtime Guest, no reset", run: wasmtimeRun(bare, seedSource, "63", nil)},
		{name: "seed demo, wasmtime pool of 2", run: pool.run(t, seedSource, "63")},
		{name: "empty, Spine pooled (wazero)", run: func() error { return expectRun(r.Run(ctx, spine.Request{}))("null") }},
		{name: "empty, bare wazero, no reset", run: func() error { return bareRun(ctx) }},
		{name: "empty, wasmtime Guest + reset", run: wasmtimeRun(g, "", "null", &resets)},
		{name: "empty, wasmtime Guest, no reset", run: wasmtimeRun(bare, "", "null", nil)},
		{name: "empty, wasmtime pool of 2", run: pool.run(t, "", "null")},
	}
	for i := range kinds {
		for range min(max(runs/10, 2), 30) { // warm-up
			if err := kinds[i].run(); err != nil {
				t.Fatalf("%s: %v", kinds[i].name, err)
			}
		}
	}
	for done := 0; done < runs; done += compareBlock {
		for i := range kinds {
			for range min(compareBlock, runs-done) {
				start := time.Now()
				if err := kinds[i].run(); err != nil {
					t.Fatalf("%s: %v", kinds[i].name, err)
				}
				kinds[i].times = append(kinds[i].times, time.Since(start))
			}
		}
	}
	fmt.Printf("\n%d runs each, interleaved in blocks of %d (p50, p90 in ms):\n", runs, compareBlock)
	for _, k := range kinds {
		fmt.Printf("  %-40s %8.3f %8.3f\n", k.name, ms(percentile(k.times, 0.5)), ms(percentile(k.times, 0.9)))
	}
	p50 := func(i int) float64 { return ms(percentile(kinds[i].times, 0.5)) }
	fmt.Printf("  seed demo: wasmtime pooled / Spine pooled %.2f×, / bare wasmtime %.2f×; wasmtime+reset / Spine pooled %.2f×\n",
		p50(3)/p50(0), p50(3)/p50(2), p50(1)/p50(0))
	fmt.Printf("  empty: wasmtime pooled / Spine pooled %.2f×; wasmtime pooled over bare wasmtime %+.3f ms; Spine over bare wazero %+.3f ms\n",
		p50(8)/p50(4), p50(8)-p50(7), p50(4)-p50(5))
	fmt.Printf("  the wasmtime Guest's reset alone: p50 %.3f ms, p90 %.3f ms\n", ms(percentile(resets, 0.5)), ms(percentile(resets, 0.9)))
	compareThroughput(t, r, seedRequest, runs)
	compareGuarantees(t, r, g)
	compareCompute(t, r, g)
}

// testPool is a pool of Guests as the Runner's: a run takes a ready Guest,
// and its reset happens after the run, off the next run's path.
type testPool struct{ ready chan *Guest }

func newTestPool(t *testing.T, n int) *testPool {
	p := &testPool{ready: make(chan *Guest, n)}
	for range n {
		p.ready <- newGuest(t)
	}
	return p
}

// run is one run of source on a ready Guest, checked for the value want;
// the Guest goes back to the pool once reset.
func (p *testPool) run(t *testing.T, source, want string) func() error {
	req := request(source, false)
	return func() error {
		g := <-p.ready
		if err := runChecked(g, req, want); err != nil {
			p.ready <- g
			return err
		}
		go func() {
			if err := g.Reset(); err != nil {
				t.Errorf("reset: %v", err)
			}
			p.ready <- g
		}()
		return nil
	}
}

// drain waits for every Guest's reset.
func (p *testPool) drain() {
	for range cap(p.ready) {
		<-p.ready
	}
}

// compareBlock is how many runs of one kind TestCompare makes in a row.
const compareBlock = 20

type kind struct {
	name  string
	run   func() error
	times []time.Duration
}

func expectRun(out *spine.Output, err error) func(want string) error {
	return func(want string) error {
		if err != nil {
			return err
		}
		if string(out.Value) != want {
			return fmt.Errorf("value %s, want %s", out.Value, want)
		}
		return nil
	}
}

// wasmtimeRun is one run of source on g, checked for the value want, then,
// with resets, g's reset (its time appended to resets), on the run's path:
// this engine has no pool to reset off it.
func wasmtimeRun(g *Guest, source, want string, resets *[]time.Duration) func() error {
	req := request(source, false)
	return func() error {
		if err := runChecked(g, req, want); err != nil || resets == nil {
			return err
		}
		start := time.Now()
		err := g.Reset()
		*resets = append(*resets, time.Since(start))
		return err
	}
}

// runChecked runs req on g and checks its value against want.
func runChecked(g *Guest, req []byte, want string) error {
	out, err := g.Execute(context.Background(), req)
	if err != nil {
		return err
	}
	var resp struct{ Value json.RawMessage }
	if err := json.Unmarshal(out, &resp); err != nil || string(resp.Value) != want {
		return fmt.Errorf("response %s, want the value %s", out, want)
	}
	return nil
}

// compareThroughput is the seed demo's runs per second with two at once:
// Spine's pooled runs, and wasmtime Guests with their resets, one each.
func compareThroughput(t *testing.T, r *spine.Runner, req spine.Request, runs int) {
	ctx := context.Background()
	rate := func(run func(worker int) error) float64 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := time.Now()
		for w := range 2 {
			wg.Go(func() {
				for range runs {
					if errs[w] = run(w); errs[w] != nil {
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return float64(2*runs) / time.Since(start).Seconds()
	}
	guests := []*Guest{newGuest(t), newGuest(t)}
	src := req.Source
	spineRate := rate(func(int) error { return expectRun(r.Run(ctx, req))("63") })
	wtRate := rate(func(w int) error { return wasmtimeRun(guests[w], src, "63", &[]time.Duration{})() })
	fmt.Printf("\nseed demo, 2 at once: Spine pooled (wazero) %.0f runs/s, wasmtime Guests + reset %.0f runs/s (%.2f×)\n",
		spineRate, wtRate, wtRate/spineRate)
}

// scratchProbe writes 80 MiB into the scratch tree, a MiB at a time, and
// answers how many MiB it wrote and the error that stopped it.
const scratchProbe = `n, err = 0, None
try:
    with open('/big', 'wb') as f:
        for _ in range(80):
            f.write(bytes(1 << 20))
            f.flush()
            n += 1
except OSError as e:
    err = type(e).__name__ + ': ' + str(e)
[n, err]`

// compareGuarantees runs two programs that meet a guarantee of the wazero
// engine on both engines: a scratch tree filled past ScratchSize (64 MiB),
// and a sleep past the run's deadline.
func compareGuarantees(t *testing.T, r *spine.Runner, g *Guest) {
	ctx := context.Background()
	fmt.Printf("\nguarantees:\n")
	out, err := r.Run(ctx, spine.Request{Source: scratchProbe})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := g.Execute(ctx, request(scratchProbe, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Reset(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("  80 MiB into the scratch tree (ScratchSize 64 MiB): wazero %s; wasmtime %s\n", out.Value, resp)
	const sleeper = "import time\ntime.sleep(2)\n"
	deadline := func(run func(ctx context.Context) error) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := run(ctx)
		return time.Since(start), err
	}
	wz, wzErr := deadline(func(ctx context.Context) error { _, err := r.Run(ctx, spine.Request{Source: sleeper}); return err })
	wt, wtErr := deadline(func(ctx context.Context) error { _, err := g.Execute(ctx, request(sleeper, false)); return err })
	for _, probe := range []struct{ what, call string }{
		{"os.write(1, b'x'), a WASI call answered in Go on both", "os.write(1, b'x')"},
		{"os.fstat(0), answered in Go on wazero, in wasmtime's Rust WASI on wasmtime", "os.fstat(0)"},
	} {
		src := "import os, time\nt0 = time.perf_counter_ns()\nfor _ in range(20000):\n    " + probe.call +
			"\n(time.perf_counter_ns() - t0) // 20000"
		out, err := r.Run(ctx, spine.Request{Source: src})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := g.Execute(ctx, request(src, false))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Reset(); err != nil {
			t.Fatal(err)
		}
		var v struct{ Value json.RawMessage }
		_ = json.Unmarshal(resp, &v)
		fmt.Printf("  %s: ns a call, wazero %s, wasmtime %s\n", probe.what, out.Value, v.Value)
	}
	fmt.Printf("  time.sleep(2) in a run with a 100 ms deadline: wazero ends after %v (%v); wasmtime after %v (%v)\n",
		wz.Round(time.Millisecond), wzErr, wt.Round(time.Millisecond), wtErr)
}

// compareCompute is the compute suite on both engines and natively: each
// program's work(setup()) as timed inside Python, the best of three.
func compareCompute(t *testing.T, r *spine.Runner, g *Guest) {
	ctx := context.Background()
	python := bench.FindPython()
	fmt.Printf("\ncompute, the best of 3 (ms): wazero (Spine), wasmtime, %s; wasmtime / wazero, each / native\n", python)
	var logWz, logWt, logRatio float64
	programs := bench.ComputePrograms()
	for _, p := range programs {
		var wz, wt, native []float64
		for range 3 {
			out, err := r.Run(ctx, spine.Request{Source: p.Source})
			if err != nil {
				t.Fatalf("%s on wazero: %v", p.Name, err)
			}
			ns, check := timed(t, out.Value)
			wz = append(wz, ns)
			resp, err := g.Execute(ctx, request(p.Source, false))
			if err != nil {
				t.Fatalf("%s on wasmtime: %v", p.Name, err)
			}
			var v struct{ Value json.RawMessage }
			if err := json.Unmarshal(resp, &v); err != nil {
				t.Fatalf("%s on wasmtime: %s", p.Name, resp)
			}
			wtNs, wtCheck := timed(t, v.Value)
			if !bench.JSONEqual(check, wtCheck) {
				t.Fatalf("%s: wazero computed %s, wasmtime %s", p.Name, check, wtCheck)
			}
			wt = append(wt, wtNs)
			if err := g.Reset(); err != nil {
				t.Fatal(err)
			}
			if python != "" {
				n, _, err := bench.NativeCompute(ctx, python, p.Source)
				if err != nil {
					t.Fatal(err)
				}
				native = append(native, float64(n)/1e6)
			}
		}
		a, b := slices.Min(wz), slices.Min(wt)
		line := fmt.Sprintf("  %-12s %8.1f %8.1f", p.Name, a, b)
		logRatio += math.Log(b / a)
		if len(native) > 0 {
			n := slices.Min(native)
			line += fmt.Sprintf(" %8.1f   %.2f×   %.2f× %.2f×", n, b/a, a/n, b/n)
			logWz += math.Log(a / n)
			logWt += math.Log(b / n)
		}
		fmt.Println(line)
	}
	k := float64(len(programs))
	fmt.Printf("  geometric mean: wasmtime / wazero %.2f×", math.Exp(logRatio/k))
	if python != "" {
		fmt.Printf("; wazero / native %.2f×, wasmtime / native %.2f×", math.Exp(logWz/k), math.Exp(logWt/k))
	}
	fmt.Println()
}

// timed is a compute program's value: ms of work(setup()), and its result.
func timed(t *testing.T, value json.RawMessage) (float64, json.RawMessage) {
	var v [2]json.RawMessage
	var ns int64
	if err := json.Unmarshal(value, &v); err != nil || json.Unmarshal(v[0], &ns) != nil {
		t.Fatalf("compute value %s", value)
	}
	return float64(ns) / 1e6, v[1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentile(samples []time.Duration, p float64) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	return s[min(int(p*float64(len(s))), len(s)-1)]
}
