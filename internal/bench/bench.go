// Package bench is the benchmark behind spine bench. It runs the seed demo's
// program in every start mode and, in the same process, the two baselines —
// native CPython executing the program in-process, and one python3 process
// per run — and reports latency percentiles, runs per second at concurrency
// 1, 2 and 4, the memory of a pool, the cost of one tool call, process start
// to first result with cold and warm caches, sessions (their runs, snapshots,
// restores, and one Runner holding thousands of them hibernated), the ratios
// of those figures and the project's performance targets, met or missed.
//
// Run measures what a Config asks for and returns a Report; Report.Print
// writes it as text, Report.WriteJSON as JSON. The cold start times new
// processes, which run FirstRun (Config.ColdStartCommand starts one).
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/experimental"
	"github.com/spine-run/spine/internal/seed"
)

// source is the program every mode and both baselines run.
const source = "price = lookup(key=\"book\")\nresult = price * inputs[\"quantity\"]\n"

// toolCallSource times, inside the Guest, 1,000 tool calls and 1,000 calls of
// a plain Python function (as BenchmarkToolCall in package spine does).
const toolCallSource = `import time
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

// modes are the start mode and Runner options of each mode measured.
var modes = map[string]struct {
	start experimental.StartMode
	opts  *spine.Options
}{
	"fresh": {experimental.StartFresh, nil},
	"copy":  {experimental.StartCopy, &spine.Options{PoolSize: -1}},
	"cow":   {experimental.StartCOW, &spine.Options{PoolSize: -1}},
	"pool":  {experimental.StartAuto, nil}, // the defaults: a pool of GOMAXPROCS
}

// modeOrder is the order of the modes in a report.
var modeOrder = []string{"fresh", "copy", "cow", "pool"}

// concurrency are the levels at which each mode's runs per second are measured.
var concurrency = []int{1, 2, 4}

// Config is what Run measures.
type Config struct {
	Runs         int  // runs per mode (latency, and each concurrency level), and native in-process runs
	FreshRuns    int  // runs for the fresh mode (60–100 ms each)
	ProcRuns     int  // python3 subprocess runs
	ToolCallRuns int  // runs of the 1,000-call loop
	Instances    int  // pooled instances for the memory measurement; 0 skips it
	ColdRuns     int  // process starts with an empty cache folder; 0 skips the cold start
	WarmRuns     int  // process starts with warm caches, after the cold ones
	SessionRuns  int  // runs of each sessions measurement, and wakes of held sessions
	Sessions     int  // sessions one Runner holds, hibernated, for its memory and wakes; 0 skips that part
	OnDisk       bool // those sessions hibernate to files (SessionOptions.Dir) rather than memory
	ComputeRuns  int  // runs of each compute workload, in the Guest and natively
	ClientCalls  int  // calls of a client tool timed, and of a Go tool, and bare round trips

	// Data is the data Guest (guest/data's Artifact) for the numpy suite,
	// which runs only with it, against NumpyPython (a python3 with numpy
	// 1.24.2; default /usr/bin/python3).
	Data        *spine.Artifact
	NumpyPython string

	// Suites are the parts to measure (nil: all of them): "modes" (the start
	// modes in Modes), "native" (the baselines, with Python), "toolcall",
	// "memory" (with Instances), "cold" (with ColdRuns), "sessions",
	// "overhead" (an empty program, pooled against a bare host, Runs of each),
	// "compute" (the compute workloads, with Python) and "clienttools"
	// (tools the caller answers over loopback HTTP: ClientCalls calls, Runs
	// runs for runs/s and for the cost of declaring tools).
	Suites []string

	Modes    []string // start modes to measure, in order: "fresh", "copy", "cow", "pool"
	PoolSize int      // the pool mode's PoolSize; 0: the default (GOMAXPROCS)
	Python   string   // the python3 of the baselines; "" skips them (FindPython finds one)

	// ColdStartCommand returns the command of one timed process start: a
	// process that calls FirstRun with cacheDir and writes its line to
	// standard output, killed when ctx ends. Run sets its Stdout and Stderr.
	// Needed when ColdRuns > 0.
	ColdStartCommand func(ctx context.Context, cacheDir string) *exec.Cmd

	// Progress, if not nil, gets a line as each measurement starts.
	Progress io.Writer
}

// DefaultConfig is what spine bench measures without flags: every mode and
// section but numpy (it needs the data Guest, Config.Data), the baselines
// skipped (Python is "").
func DefaultConfig() Config {
	return Config{
		Runs: 300, FreshRuns: 20, ProcRuns: 50, ToolCallRuns: 50,
		Instances: 64, ColdRuns: 1, WarmRuns: 5, SessionRuns: 300, Sessions: 10000, ComputeRuns: 5, ClientCalls: 200,
		Modes: slices.Clone(modeOrder), Suites: slices.DeleteFunc(slices.Clone(suiteOrder), func(s string) bool { return s == "numpy" }),
	}
}

// suiteOrder is the suites of a Config, in the order Run measures them.
var suiteOrder = []string{"memory", "native", "modes", "overhead", "toolcall", "clienttools", "compute", "numpy", "sessions", "cold"}

// has reports whether c measures suite.
func (c *Config) has(suite string) bool { return c.Suites == nil || slices.Contains(c.Suites, suite) }

// Validate reports what is wrong with c, if anything: counts out of range, an
// unknown mode or suite, a cold start without its command.
func (c *Config) Validate() error {
	if c.Runs < 1 || c.FreshRuns < 1 || c.ProcRuns < 1 || c.ToolCallRuns < 1 || c.Instances < 0 || c.ColdRuns < 0 || c.WarmRuns < 0 ||
		c.SessionRuns < 1 || c.Sessions < 0 || c.ComputeRuns < 1 || c.ClientCalls < 1 && c.has("clienttools") {
		return errors.New("run counts must be positive")
	}
	for _, m := range c.Modes {
		if _, ok := modes[m]; !ok {
			return fmt.Errorf("unknown mode %q (want fresh, copy, cow, pool)", m)
		}
	}
	for _, s := range c.Suites {
		if !slices.Contains(suiteOrder, s) {
			return fmt.Errorf("unknown suite %q (want %s)", s, strings.Join(suiteOrder, ", "))
		}
	}
	if c.has("cold") && c.ColdRuns > 0 && c.ColdStartCommand == nil {
		return errors.New("a cold start needs ColdStartCommand")
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// manifest is the tools of the program: lookup.
func manifest() spine.Manifest {
	return spine.Manifest{"lookup": {Call: seed.Lookup, AllowEarlyRead: true, Description: "Look up the price of an item by key."}}
}

// request is one run of the program, with its inputs.
func request() spine.Request {
	return spine.Request{Source: source, Inputs: map[string]any{"quantity": 3}}
}

// Run measures everything cfg asks for.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	report := &Report{
		Date:       time.Now().UTC().Format("2006-01-02 15:04 MST"),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		CPU:        cpuModel(),
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion:  runtime.Version(),
		Program:    source,
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "bench: "+format+"\n", args...)
		}
	}

	// Memory first, while the process holds nothing else.
	if cfg.has("memory") && cfg.Instances > 0 {
		progress("memory: %d pooled instances", cfg.Instances)
		m, err := measureMemory(ctx, cfg.Instances)
		if err != nil {
			return nil, fmt.Errorf("memory: %w", err)
		}
		report.Memory = m
	}
	if cfg.has("native") && cfg.Python != "" {
		progress("native baselines with %s", cfg.Python)
		n, err := measureNative(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("native baseline: %w", err)
		}
		report.Native = n
	}
	for _, mode := range cfg.Modes {
		if !cfg.has("modes") {
			break
		}
		runs := cfg.Runs
		if mode == "fresh" {
			runs = cfg.FreshRuns
		}
		progress("mode %s: %d runs", mode, runs)
		m, err := measureMode(ctx, mode, runs, cfg.PoolSize)
		if err != nil {
			if mode == "cow" && runtime.GOOS != "linux" {
				report.Modes = append(report.Modes, ModeResult{Mode: mode, Error: err.Error()})
				continue
			}
			return nil, fmt.Errorf("mode %s: %w", mode, err)
		}
		report.Modes = append(report.Modes, *m)
	}
	if cfg.has("overhead") {
		progress("overhead: %d empty programs, pooled and on a bare host", cfg.Runs)
		o, err := measureOverhead(ctx, cfg.Runs)
		if err != nil {
			return nil, fmt.Errorf("overhead: %w", err)
		}
		report.Overhead = o
	}
	if cfg.has("toolcall") {
		progress("tool call: %d runs of the 1,000-call loop", cfg.ToolCallRuns)
		tc, err := measureToolCall(ctx, cfg.ToolCallRuns)
		if err != nil {
			return nil, fmt.Errorf("tool call: %w", err)
		}
		report.ToolCall = tc
	}
	if cfg.has("clienttools") {
		progress("client tools: %d calls of a client tool, a Go tool and bare HTTP; %d runs for runs/s", cfg.ClientCalls, cfg.Runs)
		ct, err := measureClientTools(ctx, cfg.ClientCalls, cfg.Runs)
		if err != nil {
			return nil, fmt.Errorf("client tools: %w", err)
		}
		report.ClientTools = ct
	}
	if cfg.has("compute") && cfg.Python != "" {
		progress("compute: %d workloads, %d runs each, in the Guest and with %s", len(workloads), cfg.ComputeRuns, cfg.Python)
		c, err := measureCompute(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("compute: %w", err)
		}
		report.Compute = c
	}
	if cfg.has("numpy") && cfg.Data != nil {
		if cfg.NumpyPython == "" {
			cfg.NumpyPython = "/usr/bin/python3"
		}
		progress("numpy: %d workloads, %d runs each, on the data Guest and with %s", len(numpyWorkloads), cfg.ComputeRuns, cfg.NumpyPython)
		n, err := measureNumpy(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("numpy: %w", err)
		}
		report.Numpy = n
	}
	if cfg.has("sessions") {
		s, err := measureSessions(ctx, cfg.SessionRuns, cfg.Sessions, cfg.OnDisk, progress)
		if err != nil {
			return nil, fmt.Errorf("sessions: %w", err)
		}
		report.Sessions = s
	}
	if cfg.has("cold") && cfg.ColdRuns > 0 {
		progress("cold start: %d cold, %d warm process starts", cfg.ColdRuns, cfg.WarmRuns)
		c, err := measureColdStart(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("cold start: %w", err)
		}
		report.ColdStart = c
	}
	report.Ratios, report.Targets = assess(report)
	return report, nil
}

// measureMode makes a Runner for mode and measures latency at concurrency 1
// and throughput at each concurrency.
func measureMode(ctx context.Context, mode string, runs, poolSize int) (*ModeResult, error) {
	opts := modes[mode].opts
	if mode == "pool" && poolSize > 0 {
		opts = &spine.Options{PoolSize: poolSize}
	}
	r, err := spine.New(experimental.WithStart(ctx, modes[mode].start), manifest(), opts)
	if err != nil {
		return nil, err
	}
	defer closeRunner(ctx, r)
	req := request()
	once := func() error {
		out, err := r.Run(ctx, req)
		if err != nil {
			return err
		}
		if string(out.Value) != "63" {
			return fmt.Errorf("result %s, want 63", out.Value)
		}
		return nil
	}
	if err := waitPool(ctx, r, 0); err != nil {
		return nil, err
	}
	warmup := min(max(runs/10, 2), 30)
	for i := 0; i < warmup; i++ {
		if err := once(); err != nil {
			return nil, err
		}
	}
	if err := waitPool(ctx, r, 0); err != nil {
		return nil, err
	}
	samples := make([]time.Duration, 0, runs)
	for i := 0; i < runs; i++ {
		start := time.Now()
		if err := once(); err != nil {
			return nil, err
		}
		samples = append(samples, time.Since(start))
	}
	stats := r.Stats()
	m := &ModeResult{Mode: mode, Start: stats.Start, PoolSize: stats.PoolSize, Latency: summarize(samples), RunsPerSec: map[int]float64{}}
	for _, c := range concurrency {
		if err := waitPool(ctx, r, 0); err != nil {
			return nil, err
		}
		var next atomic.Int64
		var firstErr error
		var errOnce sync.Once
		var wg sync.WaitGroup
		start := time.Now()
		for g := 0; g < c; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(runs) {
					if err := once(); err != nil {
						errOnce.Do(func() { firstErr = err })
						return
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		if firstErr != nil {
			return nil, firstErr
		}
		m.RunsPerSec[c] = float64(runs) / elapsed.Seconds()
	}
	m.RSSMiB = float64(procStatus()["VmRSS"]) / 1024
	return m, nil
}

// waitPool waits until r's pool holds want instances (0: its full size), so
// a measurement does not start while the pool is still being filled.
func waitPool(ctx context.Context, r *spine.Runner, want int) error {
	if want == 0 {
		want = r.Stats().PoolSize
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a safety net, not a measurement
	defer cancel()
	for r.Stats().PoolReady < want {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pool holds %d of %d instances after 5 minutes", r.Stats().PoolReady, want)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

func measureToolCall(ctx context.Context, runs int) (*ToolCall, error) {
	r, err := spine.New(ctx, manifest(), nil)
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	var tool, plain, diff []time.Duration
	for i := 0; i < runs+1; i++ {
		out, err := r.Run(ctx, spine.Request{Source: toolCallSource})
		if err != nil {
			return nil, err
		}
		var ns [2]float64
		if err := json.Unmarshal(out.Value, &ns); err != nil {
			return nil, fmt.Errorf("result %s: %v", out.Value, err)
		}
		if i == 0 {
			continue // warm-up
		}
		tool = append(tool, time.Duration(ns[0]))
		plain = append(plain, time.Duration(ns[1]))
		diff = append(diff, time.Duration(ns[0]-ns[1]))
	}
	us := func(s []time.Duration) float64 { return summarize(s).P50 * 1000 }
	best := slices.Min(diff)
	return &ToolCall{Runs: runs, CallUs: us(diff), BestUs: float64(best) / float64(time.Microsecond), ToolUs: us(tool), PlainUs: us(plain)}, nil
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return ""
}

// closeRunner closes r and gives its memory back to the system, so that the
// next measurement's RSS starts from what the process holds without it.
func closeRunner(ctx context.Context, r *spine.Runner) {
	r.Close(ctx)
	runtime.GC()
	debug.FreeOSMemory()
}
