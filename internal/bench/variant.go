package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/wasm"
)

// VariantConfig is a comparison of the embedded Guest with a variant of it
// on the compute suite: another build's artifact (Dir), or the embedded
// Guest with its tick checks left out (NoTicks). Exactly one is set.
type VariantConfig struct {
	Dir     string // a folder holding spine.wasm and python311.zip
	NoTicks bool   // the embedded Guest without ticks (wasm.OmitTicksForMeasurement)
	Runs    int    // runs of each workload on each Guest

	// Progress, if not nil, gets a line as each run of the suite starts.
	Progress io.Writer
}

// Variant is the result: each workload's best time on both Guests and the
// variant's ratio to the embedded Guest (below 1: the variant is faster).
type Variant struct {
	Variant    string            `json:"variant"` // what was compared with the embedded Guest
	Runs       int               `json:"runs"`
	Base       VariantGuest      `json:"embedded"`
	Other      VariantGuest      `json:"variant_guest"`
	Workloads  []VariantWorkload `json:"workloads"`
	GeoMean    float64           `json:"geomean_ratio"`     // of the wall-time ratios
	GeoMeanCPU float64           `json:"geomean_cpu_ratio"` // of the thread-CPU ratios; 0 when not measured
}

// VariantGuest is what one side of a comparison is, and how long its New took.
type VariantGuest struct {
	WasmBytes int     `json:"wasm_bytes"` // the module as given (before instrumenting)
	NewMs     float64 `json:"new_ms"`     // spine.New with an empty cache folder: compile, instrument, image
}

// VariantWorkload is one workload's figures: the best run of each Guest, in
// ms, timed inside Python (wall) and as the CPU time of the thread that ran
// the Guest (the whole run, its small overhead included).
type VariantWorkload struct {
	Name     string  `json:"name"`
	BaseMs   float64 `json:"embedded_ms"`
	OtherMs  float64 `json:"variant_ms"`
	Ratio    float64 `json:"ratio"` // variant / embedded
	BaseCPU  float64 `json:"embedded_cpu_ms,omitempty"`
	OtherCPU float64 `json:"variant_cpu_ms,omitempty"`
	CPURatio float64 `json:"cpu_ratio,omitempty"`
}

// LoadVariant reads the Guest artifact in dir, its spine.wasm and
// python311.zip, and checks that the Host can instrument the module.
func LoadVariant(dir string) (*spine.Artifact, error) {
	if dir == "" {
		return nil, errors.New("variant: no folder given")
	}
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("variant: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("variant: %s is not a folder (want one holding spine.wasm and python311.zip)", dir)
	}
	var a spine.Artifact
	for _, f := range []struct {
		name string
		into *[]byte
	}{{"spine.wasm", &a.Wasm}, {guest.StdlibZipName, &a.StdlibZip}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("variant: %s has no %s (a Guest artifact folder holds spine.wasm and %s, as guest/artifact does)",
				dir, f.name, guest.StdlibZipName)
		}
		if err != nil {
			return nil, fmt.Errorf("variant: %w", err)
		}
		*f.into = b
	}
	// A module the Host cannot instrument runs with wazero's own preemption,
	// several times slower: no comparison of builds would mean anything.
	stripped, _, err := wasm.SplitData(a.Wasm)
	if err == nil {
		_, err = wasm.Instrument(stripped)
	}
	if err != nil {
		return nil, fmt.Errorf("variant: %s: the Host cannot instrument its spine.wasm (%v); a Runner would fall back to wazero's slower preemption", dir, err)
	}
	return &a, nil
}

// RunVariant runs the compute suite on the embedded Guest and on the variant,
// alternating (which goes first swaps every run), each run in a Runner with a
// pool of one that is full again before the next run, and reports the best
// of cfg.Runs of each.
func RunVariant(ctx context.Context, cfg VariantConfig) (*Variant, error) {
	if (cfg.Dir == "") == !cfg.NoTicks {
		return nil, errors.New("variant: give either a folder or no-ticks, not both or neither")
	}
	if cfg.Runs < 1 {
		return nil, errors.New("variant: runs must be positive")
	}
	v := &Variant{Runs: cfg.Runs, Variant: "the embedded Guest without its tick checks"}
	var artifact *spine.Artifact
	if cfg.Dir != "" {
		var err error
		if artifact, err = LoadVariant(cfg.Dir); err != nil {
			return nil, err
		}
		v.Variant = "the Guest artifact in " + cfg.Dir
	}
	// Each Runner compiles into its own empty cache folder, so that New's
	// time is a cold start's and the two never share an image.
	tmp, err := os.MkdirTemp("", "spine-variant-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	newRunner := func(name string, a *spine.Artifact, noTicks bool) (*spine.Runner, VariantGuest, error) {
		g := VariantGuest{WasmBytes: len(guest.Wasm)}
		if a != nil {
			g.WasmBytes = len(a.Wasm)
		}
		if noTicks {
			wasm.OmitTicksForMeasurement.Store(true)
			defer wasm.OmitTicksForMeasurement.Store(false)
		}
		start := time.Now()
		r, err := spine.New(ctx, manifest(), &spine.Options{Artifact: a, PoolSize: 1, CacheDir: filepath.Join(tmp, name)})
		g.NewMs = ms(time.Since(start))
		if err != nil {
			return nil, g, fmt.Errorf("variant: %s Guest: %w", name, err)
		}
		return r, g, nil
	}
	base, bg, err := newRunner("embedded", nil, false)
	if err != nil {
		return nil, err
	}
	defer closeRunner(ctx, base)
	other, og, err := newRunner("variant", artifact, cfg.NoTicks)
	if err != nil {
		return nil, err
	}
	defer closeRunner(ctx, other)
	v.Base, v.Other = bg, og

	type times struct{ wall, cpu []time.Duration }
	baseT := make([]times, len(workloads))
	otherT := make([]times, len(workloads))
	cpuOK := true
	for run := 0; run < cfg.Runs; run++ {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "variant: run %d of %d\n", run+1, cfg.Runs)
		}
		for i, w := range workloads {
			sides := []struct {
				r *spine.Runner
				t *times
			}{{base, &baseT[i]}, {other, &otherT[i]}}
			if (run+i)%2 == 1 {
				sides[0], sides[1] = sides[1], sides[0]
			}
			var checks [2]json.RawMessage
			for k, s := range sides {
				wall, cpu, ok, check, err := timeWorkload(ctx, s.r, w)
				if err != nil {
					return nil, err
				}
				cpuOK = cpuOK && ok
				s.t.wall = append(s.t.wall, wall)
				s.t.cpu = append(s.t.cpu, cpu)
				checks[k] = check
			}
			if !jsonEqual(checks[0], checks[1]) {
				return nil, fmt.Errorf("variant: %s computed %s on one Guest and %s on the other", w.name, checks[0], checks[1])
			}
		}
	}
	var logWall, logCPU float64
	for i, w := range workloads {
		x := VariantWorkload{Name: w.name, BaseMs: ms(slices.Min(baseT[i].wall)), OtherMs: ms(slices.Min(otherT[i].wall))}
		x.Ratio = x.OtherMs / x.BaseMs
		logWall += math.Log(x.Ratio)
		if cpuOK {
			x.BaseCPU, x.OtherCPU = ms(slices.Min(baseT[i].cpu)), ms(slices.Min(otherT[i].cpu))
			x.CPURatio = x.OtherCPU / x.BaseCPU
			logCPU += math.Log(x.CPURatio)
		}
		v.Workloads = append(v.Workloads, x)
	}
	v.GeoMean = math.Exp(logWall / float64(len(workloads)))
	if cpuOK {
		v.GeoMeanCPU = math.Exp(logCPU / float64(len(workloads)))
	}
	return v, nil
}

// timeWorkload runs w once on r, once r's pool is full again: the time
// work(setup()) took inside Python, the CPU time of the thread that ran the
// whole run (ok false when the system cannot say), and the value it
// computed.
func timeWorkload(ctx context.Context, r *spine.Runner, w workload) (wall, cpu time.Duration, ok bool, check json.RawMessage, err error) {
	if err := waitPool(ctx, r, 1); err != nil {
		return 0, 0, false, nil, err
	}
	// The Guest runs on the goroutine that calls Run; locked to its thread,
	// that thread's CPU time is the run's (a tick may yield to Go, but the
	// goroutine comes back to the same thread).
	runtime.LockOSThread()
	before, ok1 := threadCPU()
	out, err := r.Run(ctx, spine.Request{Source: w.source + computeWrap})
	after, ok2 := threadCPU()
	runtime.UnlockOSThread()
	if err != nil {
		return 0, 0, false, nil, fmt.Errorf("variant: %s: %w", w.name, err)
	}
	var result [2]json.RawMessage
	var ns int64
	if err := json.Unmarshal(out.Value, &result); err != nil || json.Unmarshal(result[0], &ns) != nil {
		return 0, 0, false, nil, fmt.Errorf("variant: %s: result %s", w.name, out.Value)
	}
	return time.Duration(ns), after - before, ok1 && ok2, result[1], nil
}

// Print writes v as text.
func (v *Variant) Print(w io.Writer) {
	fmt.Fprintf(w, "compute suite: the embedded Guest against %s (a Runner each, pool of one, alternating; the best of %d):\n",
		v.Variant, v.Runs)
	fmt.Fprintf(w, "  module: %d bytes embedded, %d variant; New with an empty cache: %.0f ms embedded, %.0f ms variant\n",
		v.Base.WasmBytes, v.Other.WasmBytes, v.Base.NewMs, v.Other.NewMs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if v.GeoMeanCPU > 0 {
		fmt.Fprintf(tw, "  workload\tembedded ms\tvariant ms\tvariant / embedded\tembedded CPU ms\tvariant CPU ms\tCPU ratio\t\n")
	} else {
		fmt.Fprintf(tw, "  workload\tembedded ms\tvariant ms\tvariant / embedded\t\n")
	}
	for _, x := range v.Workloads {
		fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\t%.3f\t", x.Name, x.BaseMs, x.OtherMs, x.Ratio)
		if v.GeoMeanCPU > 0 {
			fmt.Fprintf(tw, "%.1f\t%.1f\t%.3f\t", x.BaseCPU, x.OtherCPU, x.CPURatio)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "  geometric mean\t\t\t%.3f\t", v.GeoMean)
	if v.GeoMeanCPU > 0 {
		fmt.Fprintf(tw, "\t\t%.3f\t", v.GeoMeanCPU)
	}
	fmt.Fprintln(tw)
	tw.Flush()
}
