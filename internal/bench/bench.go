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
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
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

	// Data is the data Guest (guest/data's Artifact) for the numpy suite,
	// which runs only with it, against NumpyPython (a python3 with numpy
	// 1.24.2; default /usr/bin/python3).
	Data        *spine.Artifact
	NumpyPython string

	// Suites are the parts to measure (nil: all of them): "modes" (the start
	// modes in Modes), "native" (the baselines, with Python), "toolcall",
	// "memory" (with Instances), "cold" (with ColdRuns), "sessions",
	// "overhead" (an empty program, pooled against a bare host, Runs of each)
	// and "compute" (the compute workloads, with Python).
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
// section but numpy (which needs the data Guest), the baselines skipped
// (Python is "").
func DefaultConfig() Config {
	return Config{
		Runs: 300, FreshRuns: 20, ProcRuns: 50, ToolCallRuns: 50,
		Instances: 64, ColdRuns: 1, WarmRuns: 5, SessionRuns: 300, Sessions: 10000, ComputeRuns: 5,
		Modes: slices.Clone(modeOrder), Suites: slices.DeleteFunc(slices.Clone(suiteOrder), func(s string) bool { return s == "numpy" }),
	}
}

// suiteOrder is the suites of a Config, in the order Run measures them.
var suiteOrder = []string{"memory", "native", "modes", "overhead", "toolcall", "compute", "numpy", "sessions", "cold"}

// has reports whether c measures suite.
func (c *Config) has(suite string) bool { return c.Suites == nil || slices.Contains(c.Suites, suite) }

// Validate reports what is wrong with c, if anything: counts out of range, an
// unknown mode or suite, a cold start without its command.
func (c *Config) Validate() error {
	if c.Runs < 1 || c.FreshRuns < 1 || c.ProcRuns < 1 || c.ToolCallRuns < 1 || c.Instances < 0 || c.ColdRuns < 0 || c.WarmRuns < 0 ||
		c.SessionRuns < 1 || c.Sessions < 0 || c.ComputeRuns < 1 {
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

// Stats are the percentiles of a set of durations, in milliseconds.
type Stats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
}

// summarize returns the percentiles of samples.
func summarize(samples []time.Duration) Stats {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return Stats{N: len(s), P50: ms(percentile(s, 0.50)), P95: ms(percentile(s, 0.95)), P99: ms(percentile(s, 0.99))}
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func f0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
func f4(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

// ModeResult is one start mode's figures, or the error that kept it from
// being measured (cow off Linux).
type ModeResult struct {
	Mode       string          `json:"mode"`
	Start      string          `json:"start"`     // the Runner's resolved start mode
	PoolSize   int             `json:"pool_size"` // 0: no pool
	Latency    Stats           `json:"latency"`
	RunsPerSec map[int]float64 `json:"runs_per_sec"` // by concurrency
	RSSMiB     float64         `json:"rss_mib"`      // process VmRSS after the mode's runs
	Error      string          `json:"error,omitempty"`
}

// ToolCall is the cost of one tool call, measured inside the Guest.
type ToolCall struct {
	Runs    int     `json:"runs"`
	CallUs  float64 `json:"call_us"`  // median of (tool − plain) per call
	BestUs  float64 `json:"best_us"`  // the lowest (tool − plain) of the runs
	ToolUs  float64 `json:"tool_us"`  // median per lookup call
	PlainUs float64 `json:"plain_us"` // median per plain call
}

// Memory is the process's memory as a pool of Instances fills and runs.
type Memory struct {
	Instances int            `json:"instances"`
	FillMs    float64        `json:"fill_ms"` // New until the pool was full
	Before    MemorySnapshot `json:"before"`  // before New
	First     MemorySnapshot `json:"first"`   // as soon as the pool held FirstReady instances
	Idle      MemorySnapshot `json:"idle"`    // the pool full, no instance ever ran
	Ran       MemorySnapshot `json:"ran"`     // after every instance ran once and went back to the pool
	// FirstReady is how many instances the pool held at the First snapshot.
	FirstReady int `json:"first_ready"`
	// MarginalKiB is the RSS one more idle instance costs: (Idle − First) / (Instances − FirstReady).
	MarginalKiB float64 `json:"marginal_rss_per_instance_kib"`
	// RanExtraKiB is the RSS an instance keeps after one run: (Ran − Idle) / Instances.
	RanExtraKiB float64 `json:"ran_extra_rss_per_instance_kib"`
	NoProc      bool    `json:"no_proc,omitempty"`
}

// MemorySnapshot is the process's memory at one moment, and each instance's
// linear memory as /proc/self/smaps shows it.
type MemorySnapshot struct {
	RSSMiB          float64 `json:"rss_mib"`           // VmRSS
	PssMiB          float64 `json:"pss_mib"`           // smaps_rollup Pss
	PrivateDirtyMiB float64 `json:"private_dirty_mib"` // smaps_rollup Private_Dirty
	GuestMappings   int     `json:"guest_mappings"`    // instance memories found in smaps
	GuestRSSKiB     float64 `json:"guest_rss_kib"`     // per instance
	GuestDirtyKiB   float64 `json:"guest_private_dirty_kib"`
}

// snapMemory reads the process's memory now, after a full collection.
func snapMemory() MemorySnapshot {
	debug.FreeOSMemory() // a full collection, and the heap's free pages back to the OS
	status, rollup := procStatus(), smapsRollup()
	s := MemorySnapshot{
		RSSMiB:          float64(status["VmRSS"]) / 1024,
		PssMiB:          float64(rollup["Pss"]) / 1024,
		PrivateDirtyMiB: float64(rollup["Private_Dirty"]) / 1024,
	}
	count, rss, dirty := guestMappings()
	s.GuestMappings = count
	if count > 0 {
		s.GuestRSSKiB = float64(rss) / float64(count)
		s.GuestDirtyKiB = float64(dirty) / float64(count)
	}
	return s
}

// ColdStart is process start to first result, with empty and warm caches.
type ColdStart struct {
	Cold      []ProcessStart `json:"cold"` // each in a new empty cache folder
	Warm      []ProcessStart `json:"warm"` // the last cold run's folder again
	ColdFirst Stats          `json:"cold_first_result"`
	WarmFirst Stats          `json:"warm_first_result"`
	WarmExit  Stats          `json:"warm_exit"`
	WarmNew   Stats          `json:"warm_new"` // spine.New inside the child
	WarmRun   Stats          `json:"warm_run"` // the first Run inside the child
}

// ProcessStart is one process start: first result and exit as timed by the
// parent, New and Run as timed by the child.
type ProcessStart struct {
	FirstResultMs float64 `json:"first_result_ms"`
	ExitMs        float64 `json:"exit_ms"`
	NewMs         float64 `json:"new_ms"`
	RunMs         float64 `json:"run_ms"`
}

// Native is the baselines: the python3 executing the program in-process,
// and one python3 process per run.
type Native struct {
	Python      string `json:"python"`
	Version     string `json:"version"`
	Exec        Stats  `json:"exec"`         // exec of the compiled program, fresh globals
	CompileExec Stats  `json:"compile_exec"` // compile + exec, as the Guest does
	Subprocess  Stats  `json:"subprocess"`   // one python3 -c process per run
}

// Ratio is one figure divided by another, both measured in the same Run.
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// Target is one of the project's performance targets and its verdict.
type Target struct {
	Name   string  `json:"name"`
	Figure string  `json:"figure"`
	Value  float64 `json:"value"`
	Met    *bool   `json:"met"` // nil: not measured
}

// Report is everything a Run measured, with the machine it ran on.
type Report struct {
	Date       string       `json:"date"`
	Platform   string       `json:"platform"`
	CPU        string       `json:"cpu"`
	NumCPU     int          `json:"num_cpu"`
	GOMAXPROCS int          `json:"gomaxprocs"`
	GoVersion  string       `json:"go_version"`
	Program    string       `json:"program"`
	Modes      []ModeResult `json:"modes"`
	Native     *Native      `json:"native,omitempty"`
	ToolCall   *ToolCall    `json:"tool_call,omitempty"`
	Overhead   *Overhead    `json:"overhead,omitempty"`
	Compute    *Compute     `json:"compute,omitempty"`
	Numpy      *Numpy       `json:"numpy,omitempty"`
	Memory     *Memory      `json:"memory,omitempty"`
	ColdStart  *ColdStart   `json:"cold_start,omitempty"`
	Sessions   *Sessions    `json:"sessions,omitempty"`
	Ratios     []Ratio      `json:"ratios"`
	Targets    []Target     `json:"targets"`
}

// FindPython returns the python3 the baselines run: /usr/bin/python3.11 (the
// Guest's version) when there is one, else python3 on PATH, else "".
func FindPython() string {
	if _, err := os.Stat("/usr/bin/python3.11"); err == nil {
		return "/usr/bin/python3.11"
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p
	}
	return ""
}

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

// measureMemory fills a pool of n instances and reads the process's memory:
// before New, as the pool fills, with the pool full, and after every instance
// ran the program once.
func measureMemory(ctx context.Context, n int) (*Memory, error) {
	runtime.GC()
	debug.FreeOSMemory()
	m := &Memory{Instances: n, Before: snapMemory()}
	if m.Before.RSSMiB == 0 {
		m.NoProc = true
	}
	start := time.Now()
	// lookup waits until all n runs are inside it, so every pooled instance runs once.
	var arrived atomic.Int64
	all := make(chan struct{})
	barrier := func(ctx context.Context, args json.RawMessage) (any, error) {
		if arrived.Add(1) == int64(n) {
			close(all)
		}
		select {
		case <-all:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return seed.Lookup(ctx, args)
	}
	r, err := spine.New(ctx, spine.Manifest{"lookup": {Call: barrier}}, &spine.Options{PoolSize: n})
	if err != nil {
		return nil, err
	}
	defer closeRunner(ctx, r)
	if err := waitPool(ctx, r, 1); err != nil {
		return nil, err
	}
	m.FirstReady = r.Stats().PoolReady
	m.First = snapMemory()
	if err := waitPool(ctx, r, n); err != nil {
		return nil, err
	}
	m.FillMs = ms(time.Since(start))
	m.Idle = snapMemory()
	if n > m.FirstReady {
		m.MarginalKiB = (m.Idle.RSSMiB - m.First.RSSMiB) * 1024 / float64(n-m.FirstReady)
	}

	// Every instance runs the program once (all n at the same time), is reset
	// and goes back to the pool: the pool's steady state.
	runCtx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a safety net, not a measurement
	defer cancel()
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			out, err := r.Run(runCtx, request())
			if err == nil && string(out.Value) != "63" {
				err = fmt.Errorf("result %s, want 63", out.Value)
			}
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	if err := waitPool(ctx, r, n); err != nil {
		return nil, err
	}
	m.Ran = snapMemory()
	m.RanExtraKiB = (m.Ran.RSSMiB - m.Idle.RSSMiB) * 1024 / float64(n)
	return m, nil
}

// procStatus reads the kB fields of /proc/self/status (VmRSS, VmHWM, ...).
func procStatus() map[string]int64 { return readKB("/proc/self/status") }

// smapsRollup reads /proc/self/smaps_rollup (Rss, Pss, Private_Dirty, ...), in kB.
func smapsRollup() map[string]int64 { return readKB("/proc/self/smaps_rollup") }

func readKB(path string) map[string]int64 {
	out := map[string]int64{}
	data, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		if v, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// guestMappings finds each instance's linear memory in /proc/self/smaps — the
// image's memfd mapped privately, and the anonymous mapping right after it —
// and returns how many there are with their total Rss and Private_Dirty, in kB.
func guestMappings() (count int, rss, dirty int64) {
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, 0, 0
	}
	type mapping struct {
		start, end uint64
		image      bool
		rss, dirty int64
	}
	var maps []*mapping
	var cur *mapping
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && !strings.HasSuffix(fields[0], ":") {
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				// An instance maps the image privately and writably ("rw-p").
				image := strings.Contains(line, "memfd:spine-image") && len(fields) > 1 && fields[1] == "rw-p"
				cur = &mapping{start: start, end: end, image: image}
				maps = append(maps, cur)
				continue
			}
		}
		if cur == nil || len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "Rss:":
			cur.rss = v
		case "Private_Dirty:":
			cur.dirty = v
		}
	}
	byStart := map[uint64]*mapping{}
	for _, m := range maps {
		byStart[m.start] = m
	}
	for _, m := range maps {
		if !m.image {
			continue
		}
		count++
		rss += m.rss
		dirty += m.dirty
		if tail := byStart[m.end]; tail != nil && !tail.image {
			rss += tail.rss
			dirty += tail.dirty
		}
	}
	return count, rss, dirty
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

// nativeScript runs the program in-process n times after a warm-up, with
// fresh globals and a Python lookup equivalent to the Go tool, and prints the
// per-run times in ns: exec of the program compiled once, and compile + exec
// (the Guest compiles the source of every run).
const nativeScript = `import sys, time, json, builtins
n, warm, src = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
PRICES = {"book": 21, "pen": 2}
def lookup(*, key):
    try:
        return PRICES[key]
    except KeyError:
        raise RuntimeError("no such key: %r" % (key,)) from None
code = compile(src, "<agent>", "exec")
def once_exec():
    g = {"__builtins__": builtins, "lookup": lookup, "inputs": {"quantity": 3}}
    t0 = time.perf_counter_ns()
    exec(code, g)
    t1 = time.perf_counter_ns()
    assert g["result"] == 63
    return t1 - t0
def once_compile():
    g = {"__builtins__": builtins, "lookup": lookup, "inputs": {"quantity": 3}}
    t0 = time.perf_counter_ns()
    exec(compile(src, "<agent>", "exec"), g)
    t1 = time.perf_counter_ns()
    assert g["result"] == 63
    return t1 - t0
for _ in range(warm):
    once_exec(); once_compile()
print(json.dumps({"version": sys.version.split()[0],
                  "exec": [once_exec() for _ in range(n)],
                  "compile_exec": [once_compile() for _ in range(n)]}))
`

// subprocessScript is the program as one python3 process runs it.
const subprocessScript = `PRICES = {"book": 21, "pen": 2}
def lookup(*, key):
    try:
        return PRICES[key]
    except KeyError:
        raise RuntimeError("no such key: %r" % (key,)) from None
inputs = {"quantity": 3}
` + source + `print(result)
`

func measureNative(ctx context.Context, cfg Config) (*Native, error) {
	out, err := exec.CommandContext(ctx, cfg.Python, "-c", nativeScript,
		strconv.Itoa(cfg.Runs), strconv.Itoa(max(cfg.Runs/3, 100)), source).Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Python, err)
	}
	var native struct {
		Version     string  `json:"version"`
		Exec        []int64 `json:"exec"`
		CompileExec []int64 `json:"compile_exec"`
	}
	if err := json.Unmarshal(out, &native); err != nil {
		return nil, fmt.Errorf("%s printed %q: %v", cfg.Python, out, err)
	}
	durations := func(ns []int64) []time.Duration {
		d := make([]time.Duration, len(ns))
		for i, v := range ns {
			d[i] = time.Duration(v)
		}
		return d
	}
	n := &Native{Python: cfg.Python, Version: native.Version,
		Exec: summarize(durations(native.Exec)), CompileExec: summarize(durations(native.CompileExec))}

	var samples []time.Duration
	for i := 0; i < cfg.ProcRuns+1; i++ {
		cmd := exec.CommandContext(ctx, cfg.Python, "-c", subprocessScript)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		start := time.Now()
		err := cmd.Run()
		elapsed := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("python3 subprocess: %w", err)
		}
		if got := strings.TrimSpace(stdout.String()); got != "63" {
			return nil, fmt.Errorf("python3 subprocess printed %q, want 63", got)
		}
		if i > 0 { // the first one warms the page cache
			samples = append(samples, elapsed)
		}
	}
	n.Subprocess = summarize(samples)
	return n, nil
}

// measureColdStart times process start to first result in processes that
// run FirstRun (cfg.ColdStartCommand): ColdRuns times with an empty cache
// folder each (compiling the Guest and capturing its image), then WarmRuns
// times with the last of those folders (both caches on disk).
func measureColdStart(ctx context.Context, cfg Config) (*ColdStart, error) {
	c := &ColdStart{}
	var dir string
	for i := 0; i < cfg.ColdRuns; i++ {
		if dir != "" {
			os.RemoveAll(dir)
		}
		var err error
		if dir, err = os.MkdirTemp("", "spine-bench-cache-"); err != nil {
			return nil, err
		}
		t, err := startChild(cfg.ColdStartCommand(ctx, dir))
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.Cold = append(c.Cold, t)
	}
	defer os.RemoveAll(dir)
	for i := 0; i < cfg.WarmRuns; i++ {
		t, err := startChild(cfg.ColdStartCommand(ctx, dir))
		if err != nil {
			return nil, err
		}
		c.Warm = append(c.Warm, t)
	}
	pick := func(ts []ProcessStart, f func(ProcessStart) float64) Stats {
		d := make([]time.Duration, len(ts))
		for i, t := range ts {
			d[i] = time.Duration(f(t) * float64(time.Millisecond))
		}
		return summarize(d)
	}
	c.ColdFirst = pick(c.Cold, func(t ProcessStart) float64 { return t.FirstResultMs })
	c.WarmFirst = pick(c.Warm, func(t ProcessStart) float64 { return t.FirstResultMs })
	c.WarmExit = pick(c.Warm, func(t ProcessStart) float64 { return t.ExitMs })
	c.WarmNew = pick(c.Warm, func(t ProcessStart) float64 { return t.NewMs })
	c.WarmRun = pick(c.Warm, func(t ProcessStart) float64 { return t.RunMs })
	return c, nil
}

// startChild runs cmd, a process that runs FirstRun, and times it: from just
// before the process is started to the line with its result, and to its exit.
func startChild(cmd *exec.Cmd) (ProcessStart, error) {
	name := strings.Join(cmd.Args, " ")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return ProcessStart{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return ProcessStart{}, err
	}
	line, readErr := bufio.NewReader(pipe).ReadString('\n')
	first := time.Since(start)
	io.Copy(io.Discard, pipe)
	waitErr := cmd.Wait()
	exit := time.Since(start)
	if waitErr != nil || readErr != nil {
		return ProcessStart{}, fmt.Errorf("%s: %v %v: %s", name, waitErr, readErr, stderr.String())
	}
	var child struct {
		Value string  `json:"value"`
		NewMs float64 `json:"new_ms"`
		RunMs float64 `json:"run_ms"`
	}
	if err := json.Unmarshal([]byte(line), &child); err != nil || child.Value != "63" {
		return ProcessStart{}, fmt.Errorf("%s printed %q (%v)", name, line, err)
	}
	return ProcessStart{FirstResultMs: ms(first), ExitMs: ms(exit), NewMs: child.NewMs, RunMs: child.RunMs}, nil
}

// FirstRun is what a process started for the cold start does: New with
// cacheDir as its cache folder and the defaults otherwise, one run of the
// program, and one line to w with the result and the times of New and of the
// run, which the parent reads (a file is synced at once).
func FirstRun(ctx context.Context, cacheDir string, w io.Writer) error {
	start := time.Now()
	r, err := spine.New(ctx, manifest(), &spine.Options{CacheDir: cacheDir})
	if err != nil {
		return err
	}
	defer r.Close(ctx)
	made := time.Now()
	out, err := r.Run(ctx, request())
	if err != nil {
		return err
	}
	done := time.Now()
	fmt.Fprintf(w, "{\"value\":%q,\"new_ms\":%.3f,\"run_ms\":%.3f}\n", out.Value, ms(made.Sub(start)), ms(done.Sub(made)))
	if f, ok := w.(*os.File); ok {
		f.Sync()
	}
	return nil
}

func (r *Report) mode(name string) *ModeResult {
	for i := range r.Modes {
		if r.Modes[i].Mode == name && r.Modes[i].Error == "" {
			return &r.Modes[i]
		}
	}
	return nil
}

// assess computes the ratios and checks the project's performance targets.
func assess(r *Report) ([]Ratio, []Target) {
	var ratios []Ratio
	add := func(name string, a, b float64) {
		if a > 0 && b > 0 {
			ratios = append(ratios, Ratio{name, a / b})
		}
	}
	pool := r.mode("pool")
	if pool != nil && r.Native != nil {
		add("pool p50 / native compile+exec p50", pool.Latency.P50, r.Native.CompileExec.P50)
		add("pool p50 / native exec p50", pool.Latency.P50, r.Native.Exec.P50)
		add("python3 subprocess p50 / pool p50", r.Native.Subprocess.P50, pool.Latency.P50)
	}
	if o := r.Overhead; o != nil {
		add("empty program: pooled p50 / bare host p50", o.Pooled.P50, o.Bare.P50)
	}
	if c := r.Compute; c != nil {
		ratios = append(ratios, Ratio{"compute: Guest / native, geometric mean", c.GeoMean})
	}
	if pool != nil {
		for _, name := range []string{"fresh", "copy", "cow"} {
			if m := r.mode(name); m != nil {
				add(name+" p50 / pool p50", m.Latency.P50, pool.Latency.P50)
			}
		}
		if r.Native != nil {
			for _, name := range []string{"fresh", "copy", "cow"} {
				if m := r.mode(name); m != nil {
					add("python3 subprocess p50 / "+name+" p50", r.Native.Subprocess.P50, m.Latency.P50)
				}
			}
		}
	}

	if ss := r.Sessions; ss != nil {
		add("session run p50 / pooled p50 (sessions suite)", ss.Run.P50, ss.Pool.P50)
		add("session snapshot p50 / pooled p50", ss.Snapshot.P50, ss.Pool.P50)
		add("restore + first run p50 / pooled p50", ss.RestoreRun.P50, ss.Pool.P50)
		if h := ss.Held; h != nil {
			add("wake of a hibernated session p50 / pooled p50", h.Wake.P50, ss.Pool.P50)
		}
	}

	var targets []Target
	check := func(name, figure string, value float64, measured, met bool) {
		t := Target{Name: name, Figure: figure, Value: value}
		if measured {
			t.Met = &met
		}
		targets = append(targets, t)
	}
	var poolP50, poolRate2 float64
	if pool != nil {
		poolP50, poolRate2 = pool.Latency.P50, pool.RunsPerSec[2]
	}
	check("warm run p50 ≤ 0.2 ms", fmt.Sprintf("%.3f ms", poolP50), poolP50, pool != nil, poolP50 <= 0.2)
	var vsNative, vsProc float64
	if pool != nil && r.Native != nil {
		vsNative = poolP50 / r.Native.CompileExec.P50
		vsProc = r.Native.Subprocess.P50 / poolP50
	}
	check("warm run p50 ≤ 15× native in-process (compile+exec)", fmt.Sprintf("%.1f×", vsNative), vsNative, vsNative > 0, vsNative <= 15)
	var overhead float64
	if r.Overhead != nil {
		overhead = r.Overhead.Overhead
	}
	check("empty program: pooled p50 − bare host p50 ≤ 0.08 ms", fmt.Sprintf("%.3f ms", overhead), overhead, r.Overhead != nil, overhead <= 0.08)
	var compute float64
	if r.Compute != nil {
		compute = r.Compute.GeoMean
	}
	check("compute: Guest / native, geometric mean ≤ 2.5×", fmt.Sprintf("%.2f×", compute), compute, r.Compute != nil, compute <= 2.5)
	check("≥ 30× faster than a python3 subprocess per run", fmt.Sprintf("%.1f×", vsProc), vsProc, vsProc > 0, vsProc >= 30)
	var call float64
	if r.ToolCall != nil {
		call = r.ToolCall.CallUs
	}
	check("one tool call ≤ 15 µs", fmt.Sprintf("%.1f µs", call), call, r.ToolCall != nil, call <= 15)
	check("≥ 2,000 runs/s at concurrency 2", fmt.Sprintf("%.0f runs/s", poolRate2), poolRate2, pool != nil, poolRate2 >= 2000)
	var rss float64
	memOK := r.Memory != nil && !r.Memory.NoProc && r.Memory.Instances == 64
	if memOK {
		rss = max(r.Memory.Idle.RSSMiB, r.Memory.Ran.RSSMiB) // idle as made, or idle after a run each
	}
	check("64 idle warm instances ≤ 512 MiB RSS", fmt.Sprintf("%.0f MiB", rss), rss, memOK, rss <= 512)
	var first float64
	coldOK := r.ColdStart != nil && len(r.ColdStart.Warm) > 0
	if coldOK {
		first = r.ColdStart.WarmFirst.P50
	}
	check("first result in a new process ≤ 150 ms, warm caches", fmt.Sprintf("%.0f ms", first), first, coldOK, first <= 150)

	ss := r.Sessions
	var snapKiB, snapMs, restoreMore, sessionRatio float64
	if ss != nil {
		snapKiB, snapMs = float64(ss.SnapshotBytes.P50)/1024, ss.Snapshot.P50
		restoreMore = ss.RestoreRun.P50 - ss.Pool.P50
		sessionRatio = ss.Run.P50 / ss.Pool.P50
	}
	check("session snapshot ≤ 256 KiB", fmt.Sprintf("%.0f KiB", snapKiB), snapKiB, ss != nil, snapKiB <= 256)
	check("session snapshot p50 ≤ 5 ms", fmt.Sprintf("%.2f ms", snapMs), snapMs, ss != nil, snapMs <= 5)
	check("restore + first run p50 ≤ pooled run p50 + 5 ms", fmt.Sprintf("%+.2f ms", restoreMore), restoreMore, ss != nil, restoreMore <= 5)
	check("session run p50 ≤ 1.2× pooled run p50", fmt.Sprintf("%.2f×", sessionRatio), sessionRatio, ss != nil, sessionRatio <= 1.2)
	var heldRSS, wake50, wake99 float64
	held := ss != nil && ss.Held != nil
	heldOK := held && ss.Held.Sessions >= 10000 && !ss.Held.Held.noProc()
	if held {
		heldRSS, wake50, wake99 = ss.Held.Held.RSSMiB, ss.Held.Wake.P50, ss.Held.Wake.P99
	}
	check("10,000 sessions in one Runner ≤ 2 GiB RSS", fmt.Sprintf("%.0f MiB", heldRSS), heldRSS, heldOK, heldRSS <= 2048)
	check("wake of a hibernated session p50 ≤ 10 ms", fmt.Sprintf("%.2f ms", wake50), wake50, held, wake50 <= 10)
	check("wake of a hibernated session p99 ≤ 10 ms", fmt.Sprintf("%.2f ms", wake99), wake99, held, wake99 <= 10)
	return ratios, targets
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Print writes the report as text: a table of the modes and baselines, then
// the tool call, memory, cold start, ratios and targets.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "spine bench  %s  %s, %s, %d CPUs (GOMAXPROCS %d), %s\n", r.Date, r.Platform, r.CPU, r.NumCPU, r.GOMAXPROCS, r.GoVersion)
	fmt.Fprintf(w, "program (inputs {\"quantity\": 3}, lookup(key=\"book\") = 21):\n%s\n", seed.Indent(r.Program))

	type row struct {
		name  string
		cells []string
	}
	var rows []row
	for _, m := range r.Modes {
		if m.Error != "" {
			rows = append(rows, row{m.Mode, []string{m.Error}})
			continue
		}
		rows = append(rows, row{m.Mode, []string{strconv.Itoa(m.Latency.N), f3(m.Latency.P50), f3(m.Latency.P95), f3(m.Latency.P99),
			f0(m.RunsPerSec[1]), f0(m.RunsPerSec[2]), f0(m.RunsPerSec[4]), f0(m.RSSMiB)}})
	}
	if n := r.Native; n != nil {
		name := filepath.Base(n.Python) + " " + n.Version
		rows = append(rows,
			row{"native " + name + " in-process, exec", []string{strconv.Itoa(n.Exec.N), f4(n.Exec.P50), f4(n.Exec.P95), f4(n.Exec.P99)}},
			row{"native " + name + " in-process, compile+exec", []string{strconv.Itoa(n.CompileExec.N), f4(n.CompileExec.P50), f4(n.CompileExec.P95), f4(n.CompileExec.P99)}},
			row{name + " subprocess per run", []string{strconv.Itoa(n.Subprocess.N), f3(n.Subprocess.P50), f3(n.Subprocess.P95), f3(n.Subprocess.P99)}})
	}
	width := len("mode")
	for _, x := range rows {
		width = max(width, len(x.name))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(rows) > 0 {
		fmt.Fprintf(tw, "%-*s\truns\tp50 ms\tp95 ms\tp99 ms\truns/s c=1\tc=2\tc=4\tRSS MiB\t\n", width, "mode (latency at concurrency 1)")
	}
	for _, x := range rows {
		cells := append(x.cells, make([]string, 8-min(len(x.cells), 8))...)
		fmt.Fprintf(tw, "%-*s\t%s\t\n", width, x.name, strings.Join(cells, "\t"))
	}
	tw.Flush()
	var notes []string
	for _, m := range r.Modes {
		if m.Error == "" {
			note := m.Mode + " = " + m.Start
			if m.PoolSize > 0 {
				note += fmt.Sprintf(" with a pool of %d", m.PoolSize)
			}
			notes = append(notes, note)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "(%s; runs/s: a fixed number of runs split over c goroutines, by wall time)\n", strings.Join(notes, ", "))
	}

	if o := r.Overhead; o != nil {
		fmt.Fprintf(w, "\nempty program, %d of each in alternating blocks of %d: pooled p50 %.3f ms (p95 %.3f), bare host p50 %.3f ms (p95 %.3f, one instance reused without a reset): %.3f ms more a run\n",
			o.Pooled.N, overheadBlock, o.Pooled.P50, o.Pooled.P95, o.Bare.P50, o.Bare.P95, o.Overhead)
	}
	if c := r.Compute; c != nil {
		c.print(w)
	}
	if n := r.Numpy; n != nil {
		n.print(w)
	}
	if tc := r.ToolCall; tc != nil {
		fmt.Fprintf(w, "\ntool call: %.2f µs per call (lookup %.2f µs − plain Python call %.2f µs; 1,000 of each per run, median of %d runs; best run %.2f µs)\n",
			tc.CallUs, tc.ToolUs, tc.PlainUs, tc.Runs, tc.BestUs)
	}
	if m := r.Memory; m != nil {
		if m.NoProc {
			fmt.Fprintf(w, "\nmemory: no /proc here\n")
		} else {
			fmt.Fprintf(w, "\nmemory, a pool of %d (filled in %.0f ms after New began):\n", m.Instances, m.FillMs)
			fmt.Fprintf(w, "  process RSS: %.1f MiB before New, %.1f MiB with %d ready, %.1f MiB with all %d idle, %.1f MiB after each ran once\n",
				m.Before.RSSMiB, m.First.RSSMiB, m.FirstReady, m.Idle.RSSMiB, m.Instances, m.Ran.RSSMiB)
			fmt.Fprintf(w, "  process Pss / Private_Dirty: %.1f / %.1f MiB idle, %.1f / %.1f MiB after each ran once\n",
				m.Idle.PssMiB, m.Idle.PrivateDirtyMiB, m.Ran.PssMiB, m.Ran.PrivateDirtyMiB)
			fmt.Fprintf(w, "  per instance: +%.0f KiB RSS idle (marginal), +%.0f KiB more after a run\n", m.MarginalKiB, m.RanExtraKiB)
			fmt.Fprintf(w, "  per instance linear memory (smaps, %d / %d instances found): Rss %.0f KiB, Private_Dirty %.0f KiB idle; Rss %.0f KiB, Private_Dirty %.0f KiB after a run\n",
				m.Idle.GuestMappings, m.Ran.GuestMappings, m.Idle.GuestRSSKiB, m.Idle.GuestDirtyKiB, m.Ran.GuestRSSKiB, m.Ran.GuestDirtyKiB)
		}
	}
	if c := r.ColdStart; c != nil {
		fmt.Fprintf(w, "\ncold start, process start to first result (this binary re-run: New with defaults and CacheDir, one Run):\n")
		for _, t := range c.Cold {
			fmt.Fprintf(w, "  empty cache folder: %.0f ms (New %.0f ms: compile + image capture; Run %.1f ms; exit at %.0f ms)\n", t.FirstResultMs, t.NewMs, t.RunMs, t.ExitMs)
		}
		if len(c.Warm) > 0 {
			fmt.Fprintf(w, "  warm caches, median of %d: %.0f ms (New %.0f ms, Run %.1f ms; exit at %.0f ms); p95 %.0f ms\n",
				len(c.Warm), c.WarmFirst.P50, c.WarmNew.P50, c.WarmRun.P50, c.WarmExit.P50, c.WarmFirst.P95)
		}
	}
	if ss := r.Sessions; ss != nil {
		ss.print(w)
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nratios (p50s measured in this command):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, x := range r.Ratios {
			fmt.Fprintf(tw, "  %s\t%.1f×\n", x.Name, x.Value)
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\nperformance targets:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range r.Targets {
		verdict := "not measured"
		figure := t.Figure
		if t.Met == nil {
			figure = "—"
		} else if *t.Met {
			verdict = "met"
		} else {
			verdict = "MISSED"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", t.Name, figure, verdict)
	}
	tw.Flush()
}

// closeRunner closes r and gives its memory back to the system, so that the
// next measurement's RSS starts from what the process holds without it.
func closeRunner(ctx context.Context, r *spine.Runner) {
	r.Close(ctx)
	runtime.GC()
	debug.FreeOSMemory()
}
