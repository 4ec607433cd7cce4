package wasmtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/guest/data"
	"github.com/spine-run/spine/internal/bench"
	"github.com/spine-run/spine/internal/engine"
)

// numpyPython is the numpy suite's native side: Debian's python3 with
// numpy and pandas (make data-native installs them).
const numpyPython = "/usr/bin/python3"

// TestCompareData measures the data Guest on wazero (Spine's Runner) and on
// wasmtime: its first start on each with an empty cache folder (compiling it
// and taking its image) and its first run, then the numpy suite of spine
// bench on both and natively, alternating, the best of
// SPINE_COMPARE_DATA_RUNS (5 by default). make wasmtime-compare runs it
// after TestCompare (SPINE_WASMTIME_COMPARE=1).
func TestCompareData(t *testing.T) {
	if os.Getenv("SPINE_WASMTIME_COMPARE") == "" {
		t.Skip("a measurement: SPINE_WASMTIME_COMPARE=1 runs it (make wasmtime-compare)")
	}
	runs := 5
	if n, err := strconv.Atoi(os.Getenv("SPINE_COMPARE_DATA_RUNS")); err == nil && n > 0 {
		runs = n
	}
	if out, err := exec.Command(numpyPython, "-c", "import numpy, pandas").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import numpy and pandas (make data-native installs them): %v: %s", numpyPython, err, out)
	}
	ctx := context.Background()
	r, e := compareFirstStart(t)
	defer r.Close(ctx)
	defer e.Close()
	g, err := e.NewGuest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if g != nil {
			g.Close()
		}
	}()

	programs := bench.NumpyPrograms()
	wz, wt, native := make([][]float64, len(programs)), make([][]float64, len(programs)), make([][]float64, len(programs))
	var version string
	renewed := 0
	for range runs {
		for i, p := range programs {
			out, err := r.Run(ctx, spine.Request{Source: p.Source})
			if err != nil {
				t.Fatalf("%s on wazero: %v", p.Name, err)
			}
			wzNs, wzCheck, ok := bench.NumpyValue(out.Value)
			if !ok {
				t.Fatalf("%s on wazero: value %s (stderr %s)", p.Name, out.Value, out.Stderr)
			}
			resp, err := g.Execute(ctx, request(p.Source, false))
			if err != nil {
				t.Fatalf("%s on wasmtime: %v", p.Name, err)
			}
			var v struct{ Value json.RawMessage }
			_ = json.Unmarshal(resp, &v)
			wtNs, wtCheck, ok := bench.NumpyValue(v.Value)
			if !ok {
				t.Fatalf("%s on wasmtime: response %s", p.Name, resp)
			}
			if !bench.SameFloats(wzCheck, wtCheck) {
				t.Fatalf("%s: wazero computed %v, wasmtime %v", p.Name, wzCheck, wtCheck)
			}
			if g, err = resetOrRenew(ctx, e, g); errors.Is(err, ErrNotReusable) {
				renewed++
			} else if err != nil {
				t.Fatal(err)
			}
			nNs, nCheck, ver, err := bench.NativeNumpy(ctx, numpyPython, p.Source)
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			if !bench.SameFloats(wzCheck, nCheck) {
				t.Fatalf("%s: the data Guest computed %v, %s %v", p.Name, wzCheck, numpyPython, nCheck)
			}
			version = ver
			wz[i], wt[i], native[i] = append(wz[i], float64(wzNs)/1e6), append(wt[i], float64(wtNs)/1e6), append(native[i], float64(nNs)/1e6)
		}
	}
	fmt.Printf("\nnumpy and pandas (spine bench's numpy suite; work(setup()) timed inside Python), the best of %d (ms): wazero (Spine), wasmtime, %s (%s); wasmtime / wazero, each / native\n",
		runs, numpyPython, version)
	var logWz, logWt, logRatio float64
	for i, p := range programs {
		a, b, n := slices.Min(wz[i]), slices.Min(wt[i]), slices.Min(native[i])
		fmt.Printf("  %-26s %8.2f %8.2f %8.2f   %.2f×   %.2f× %.2f×\n", p.Name, a, b, n, b/a, a/n, b/n)
		logRatio += math.Log(b / a)
		logWz += math.Log(a / n)
		logWt += math.Log(b / n)
	}
	k := float64(len(programs))
	fmt.Printf("  geometric mean: wasmtime / wazero %.2f×; wazero / native %.2f×, wasmtime / native %.2f×\n",
		math.Exp(logRatio/k), math.Exp(logWz/k), math.Exp(logWt/k))
	fmt.Printf("  (wasmtime Guests replaced after a run whose memory grew past the image: %d of %d)\n", renewed, runs*len(programs))
}

// tinyNumpy is the first run's program.
const tinyNumpy = "import numpy as np\nint(np.arange(10).sum())"

// compareFirstStart starts the data Guest on each engine with an empty
// cache folder, and prints how long its compile, the rest of New and the
// first run took, then a second New with the cache filled. It returns the
// Runner and the Engine.
func compareFirstStart(t *testing.T) (*spine.Runner, *Engine) {
	ctx := context.Background()
	a := data.Artifact()
	wzDir, wtDir := t.TempDir(), t.TempDir()
	opts := func() *spine.Options { return &spine.Options{Artifact: data.Artifact(), PoolSize: 1, CacheDir: wzDir} }
	timed := func(f func() error) time.Duration {
		start := time.Now()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	var r *spine.Runner
	var e *Engine
	// wazero's compile alone: the engine without an image. Its compiled
	// code is cached under the module's code, which the Runner's New then
	// finds in the same folder.
	wzCompile := timed(func() error {
		c, err := engine.New(ctx, engine.Config{Wasm: a.Wasm, StdlibZip: a.StdlibZip, Start: engine.StartFresh, CacheDir: wzDir, MemoryLimit: 256 << 20})
		if err == nil {
			c.Close(ctx)
		}
		return err
	})
	wzNew := timed(func() (err error) { r, err = spine.New(ctx, nil, opts()); return err })
	wzRun := timed(func() error { return expectRun(r.Run(ctx, spine.Request{Source: tinyNumpy}))("45") })
	wzAgain := timed(func() error {
		r2, err := spine.New(ctx, nil, opts())
		if err == nil {
			err = r2.Close(ctx)
		}
		return err
	})
	wtNew := timed(func() (err error) { e, err = New(ctx, dataConfig(wtDir)); return err })
	wtRun := timed(func() error {
		g, err := e.NewGuest(ctx)
		if err != nil {
			return err
		}
		defer g.Close()
		return runChecked(g, request(tinyNumpy, false), "45")
	})
	var again time.Duration
	wtAgain := timed(func() error {
		e2, err := New(ctx, dataConfig(wtDir))
		if err == nil {
			again = e2.compileTime
			err = e2.Close()
		}
		return err
	})
	fmt.Printf("\nthe data Guest's first start, an empty cache folder each (s): the compile, the rest of New (warm-up, image), the first run (%q); New again with the cache filled\n",
		tinyNumpy)
	fmt.Printf("  wazero (Spine, a pool of 1)  %7.2f %7.2f %7.3f   %5.2f (the compiled code and the image from the cache)\n",
		wzCompile.Seconds(), wzNew.Seconds(), wzRun.Seconds(), wzAgain.Seconds())
	fmt.Printf("  wasmtime (a new Guest)       %7.2f %7.2f %7.3f   %5.2f (the compiled code mapped from the cache in %.2f s, the warm-up run again)\n",
		e.compileTime.Seconds(), (wtNew - e.compileTime).Seconds(), wtRun.Seconds(), wtAgain.Seconds(), again.Seconds())
	return r, e
}
