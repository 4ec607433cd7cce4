package main

// spine bench: the project's benchmark (issue 4). It measures the seed demo's
// program in every start mode and, in the same process, the two baselines —
// native CPython executing the program in-process, and one python3 process
// per run — and prints the figures, their ratios and the targets.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
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
)

// benchSource is the program every mode and both baselines run.
const benchSource = "price = lookup(key=\"book\")\nresult = price * inputs[\"quantity\"]\n"

// benchToolCallSource times, inside the Guest, 1,000 tool calls and 1,000 calls of
// a plain Python function (as BenchmarkToolCall in package spine does).
const benchToolCallSource = `import time
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

// benchChildEnv marks a process that bench started to time a cold start.
const benchChildEnv = "SPINE_BENCH_CHILD"

var benchModes = map[string]func() *spine.Options{
	"fresh": func() *spine.Options { return &spine.Options{Start: spine.StartFresh} },
	"copy":  func() *spine.Options { return &spine.Options{Start: spine.StartCopy, PoolSize: -1} },
	"cow":   func() *spine.Options { return &spine.Options{Start: spine.StartCOW, PoolSize: -1} },
	"pool":  func() *spine.Options { return nil }, // the defaults: StartAuto, a pool of GOMAXPROCS
}

var benchModeOrder = []string{"fresh", "copy", "cow", "pool"}

var benchConcurrency = []int{1, 2, 4}

type benchConfig struct {
	runs, freshRuns, procRuns, toolRuns int
	instances                           int
	coldRuns, warmRuns                  int
	modes                               []string
	poolSize                            int    // for the pool mode; 0: the default (GOMAXPROCS)
	python                              string // "" when the baselines are skipped
	asJSON                              bool
}

// benchStats are the percentiles of a set of durations, in milliseconds.
type benchStats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
}

func benchSummarize(samples []time.Duration) benchStats {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return benchStats{N: len(s), P50: benchMS(benchPercentile(s, 0.50)), P95: benchMS(benchPercentile(s, 0.95)), P99: benchMS(benchPercentile(s, 0.99))}
}

// benchPercentile is the nearest-rank percentile of sorted samples.
func benchPercentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func benchMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func benchF0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
func benchF3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
func benchF4(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

type benchMode struct {
	Mode       string          `json:"mode"`
	Start      string          `json:"start"`     // the Runner's resolved start mode
	PoolSize   int             `json:"pool_size"` // 0: no pool
	Latency    benchStats      `json:"latency"`
	RunsPerSec map[int]float64 `json:"runs_per_sec"` // by concurrency
	RSSMiB     float64         `json:"rss_mib"`      // process VmRSS after the mode's runs
	Error      string          `json:"error,omitempty"`
}

type benchToolCall struct {
	Runs    int     `json:"runs"`
	CallUs  float64 `json:"call_us"`  // median of (tool − plain) per call
	BestUs  float64 `json:"best_us"`  // the lowest (tool − plain) of the runs
	ToolUs  float64 `json:"tool_us"`  // median per lookup call
	PlainUs float64 `json:"plain_us"` // median per plain call
}

type benchMemory struct {
	Instances int          `json:"instances"`
	FillMs    float64      `json:"fill_ms"` // New until the pool was full
	Before    benchMemSnap `json:"before"`  // before New
	First     benchMemSnap `json:"first"`   // as soon as the pool held FirstReady instances
	Idle      benchMemSnap `json:"idle"`    // the pool full, no instance ever ran
	Ran       benchMemSnap `json:"ran"`     // after every instance ran once and went back to the pool
	// FirstReady is how many instances the pool held at the First snapshot.
	FirstReady int `json:"first_ready"`
	// MarginalKiB is the RSS one more idle instance costs: (Idle − First) / (Instances − FirstReady).
	MarginalKiB float64 `json:"marginal_rss_per_instance_kib"`
	// RanExtraKiB is the RSS an instance keeps after one run: (Ran − Idle) / Instances.
	RanExtraKiB float64 `json:"ran_extra_rss_per_instance_kib"`
	NoProc      bool    `json:"no_proc,omitempty"`
}

// benchMemSnap is the process's memory at one moment, and each instance's linear
// memory as /proc/self/smaps shows it.
type benchMemSnap struct {
	RSSMiB          float64 `json:"rss_mib"`           // VmRSS
	PssMiB          float64 `json:"pss_mib"`           // smaps_rollup Pss
	PrivateDirtyMiB float64 `json:"private_dirty_mib"` // smaps_rollup Private_Dirty
	GuestMappings   int     `json:"guest_mappings"`    // instance memories found in smaps
	GuestRSSKiB     float64 `json:"guest_rss_kib"`     // per instance
	GuestDirtyKiB   float64 `json:"guest_private_dirty_kib"`
}

func benchSnapMemory() benchMemSnap {
	debug.FreeOSMemory() // a full collection, and the heap's free pages back to the OS
	status, rollup := benchProcStatus(), benchSmapsRollup()
	s := benchMemSnap{
		RSSMiB:          float64(status["VmRSS"]) / 1024,
		PssMiB:          float64(rollup["Pss"]) / 1024,
		PrivateDirtyMiB: float64(rollup["Private_Dirty"]) / 1024,
	}
	count, rss, dirty := benchGuestMappings()
	s.GuestMappings = count
	if count > 0 {
		s.GuestRSSKiB = float64(rss) / float64(count)
		s.GuestDirtyKiB = float64(dirty) / float64(count)
	}
	return s
}

type benchCold struct {
	Cold      []benchChildTiming `json:"cold"` // each in a new empty cache folder
	Warm      []benchChildTiming `json:"warm"` // the last cold run's folder again
	ColdFirst benchStats         `json:"cold_first_result"`
	WarmFirst benchStats         `json:"warm_first_result"`
	WarmExit  benchStats         `json:"warm_exit"`
	WarmNew   benchStats         `json:"warm_new"` // spine.New inside the child
	WarmRun   benchStats         `json:"warm_run"` // the first Run inside the child
}

// benchChildTiming is one process start: first result and exit as timed by the
// parent, New and Run as timed by the child.
type benchChildTiming struct {
	FirstResultMs float64 `json:"first_result_ms"`
	ExitMs        float64 `json:"exit_ms"`
	NewMs         float64 `json:"new_ms"`
	RunMs         float64 `json:"run_ms"`
}

type benchNative struct {
	Python      string     `json:"python"`
	Version     string     `json:"version"`
	Exec        benchStats `json:"exec"`         // exec of the compiled program, fresh globals
	CompileExec benchStats `json:"compile_exec"` // compile + exec, as the Guest does
	Subprocess  benchStats `json:"subprocess"`   // one python3 -c process per run
}

type benchRatio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

type benchTarget struct {
	Name   string  `json:"name"`
	Figure string  `json:"figure"`
	Value  float64 `json:"value"`
	Met    *bool   `json:"met"` // nil: not measured
}

type benchReport struct {
	Date       string         `json:"date"`
	Platform   string         `json:"platform"`
	CPU        string         `json:"cpu"`
	NumCPU     int            `json:"num_cpu"`
	GOMAXPROCS int            `json:"gomaxprocs"`
	GoVersion  string         `json:"go_version"`
	Program    string         `json:"program"`
	Modes      []benchMode    `json:"modes"`
	Native     *benchNative   `json:"native,omitempty"`
	ToolCall   *benchToolCall `json:"tool_call,omitempty"`
	Memory     *benchMemory   `json:"memory,omitempty"`
	ColdStart  *benchCold     `json:"cold_start,omitempty"`
	Ratios     []benchRatio   `json:"ratios"`
	Targets    []benchTarget  `json:"targets"`
}

func bench(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "first-run" { // internal: one timed process start
		return benchFirstRun(args[1:], stdout, stderr)
	}
	flags := flag.NewFlagSet("spine bench", flag.ContinueOnError)
	flags.SetOutput(stderr)
	var cfg benchConfig
	flags.IntVar(&cfg.runs, "runs", 300, "runs per mode (latency, and each concurrency level), and native in-process runs")
	flags.IntVar(&cfg.freshRuns, "fresh-runs", 20, "runs for the fresh mode (60–100 ms each)")
	flags.IntVar(&cfg.procRuns, "proc-runs", 50, "python3 subprocess runs")
	flags.IntVar(&cfg.toolRuns, "toolcall-runs", 50, "runs of the 1,000-call loop")
	flags.IntVar(&cfg.instances, "instances", 64, "pooled instances for the memory measurement (0: skip)")
	flags.IntVar(&cfg.coldRuns, "cold-runs", 1, "process starts with an empty cache folder (0: skip cold start)")
	flags.IntVar(&cfg.warmRuns, "warm-runs", 5, "process starts with warm caches")
	modes := flags.String("modes", strings.Join(benchModeOrder, ","), "start modes to measure: fresh, copy, cow, pool")
	python := flags.String("python", "auto", `python3 for the baselines; "none" skips them`)
	flags.IntVar(&cfg.poolSize, "pool-size", 0, "the pool mode's PoolSize (0: the default, GOMAXPROCS)")
	flags.BoolVar(&cfg.asJSON, "json", false, "print the report as JSON")
	flags.Usage = func() {
		fmt.Fprint(stderr, "usage: spine bench [flags]\n\nMeasures the seed demo's program in each start mode against native CPython.\n\n")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "spine bench: unexpected argument %q\n", flags.Arg(0))
		return 2
	}
	if cfg.runs < 1 || cfg.freshRuns < 1 || cfg.procRuns < 1 || cfg.toolRuns < 1 || cfg.instances < 0 || cfg.coldRuns < 0 || cfg.warmRuns < 0 {
		fmt.Fprintln(stderr, "spine bench: run counts must be positive")
		return 2
	}
	for _, m := range strings.Split(*modes, ",") {
		if m = strings.TrimSpace(m); m == "" {
			continue
		}
		if benchModes[m] == nil {
			fmt.Fprintf(stderr, "spine bench: unknown mode %q (want fresh, copy, cow, pool)\n", m)
			return 2
		}
		cfg.modes = append(cfg.modes, m)
	}
	switch *python {
	case "none", "":
	case "auto":
		cfg.python = benchFindPython()
		if cfg.python == "" {
			fmt.Fprintln(stderr, "spine bench: no python3 found; skipping the baselines")
		}
	default:
		cfg.python = *python
	}

	report, err := benchRunAll(context.Background(), cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "spine bench:", err)
		return 1
	}
	if cfg.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			fmt.Fprintln(stderr, "spine bench:", err)
			return 1
		}
		return 0
	}
	benchPrint(stdout, report)
	return 0
}

func benchFindPython() string {
	if _, err := os.Stat("/usr/bin/python3.11"); err == nil {
		return "/usr/bin/python3.11"
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p
	}
	return ""
}

func benchManifest() spine.Manifest {
	return spine.Manifest{"lookup": {Call: lookup, AllowEarlyRead: true, Description: "Look up the price of an item by key."}}
}

func benchRequest() spine.Request {
	return spine.Request{Source: benchSource, Inputs: map[string]any{"quantity": 3}}
}

// benchRunAll measures everything cfg asks for; progress goes to log.
func benchRunAll(ctx context.Context, cfg benchConfig, log io.Writer) (*benchReport, error) {
	report := &benchReport{
		Date:       time.Now().UTC().Format("2006-01-02 15:04 MST"),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		CPU:        benchCPUModel(),
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion:  runtime.Version(),
		Program:    benchSource,
	}
	progress := func(format string, args ...any) { fmt.Fprintf(log, "bench: "+format+"\n", args...) }

	// Memory first, while the process holds nothing else.
	if cfg.instances > 0 {
		progress("memory: %d pooled instances", cfg.instances)
		m, err := benchMeasureMemory(ctx, cfg.instances)
		if err != nil {
			return nil, fmt.Errorf("memory: %w", err)
		}
		report.Memory = m
	}
	if cfg.python != "" {
		progress("native baselines with %s", cfg.python)
		n, err := benchMeasureNative(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("native baseline: %w", err)
		}
		report.Native = n
	}
	for _, mode := range cfg.modes {
		runs := cfg.runs
		if mode == "fresh" {
			runs = cfg.freshRuns
		}
		progress("mode %s: %d runs", mode, runs)
		m, err := benchMeasureMode(ctx, mode, runs, cfg.poolSize)
		if err != nil {
			if mode == "cow" && runtime.GOOS != "linux" {
				report.Modes = append(report.Modes, benchMode{Mode: mode, Error: err.Error()})
				continue
			}
			return nil, fmt.Errorf("mode %s: %w", mode, err)
		}
		report.Modes = append(report.Modes, *m)
	}
	progress("tool call: %d runs of the 1,000-call loop", cfg.toolRuns)
	tc, err := benchMeasureToolCall(ctx, cfg.toolRuns)
	if err != nil {
		return nil, fmt.Errorf("tool call: %w", err)
	}
	report.ToolCall = tc
	if cfg.coldRuns > 0 {
		progress("cold start: %d cold, %d warm process starts", cfg.coldRuns, cfg.warmRuns)
		c, err := benchMeasureColdStart(ctx, cfg.coldRuns, cfg.warmRuns)
		if err != nil {
			return nil, fmt.Errorf("cold start: %w", err)
		}
		report.ColdStart = c
	}
	report.Ratios, report.Targets = benchAssess(report)
	return report, nil
}

// benchMeasureMode makes a Runner for mode and measures latency at concurrency 1
// and throughput at each concurrency.
func benchMeasureMode(ctx context.Context, mode string, runs, poolSize int) (*benchMode, error) {
	opts := benchModes[mode]()
	if mode == "pool" && poolSize > 0 {
		opts = &spine.Options{PoolSize: poolSize}
	}
	r, err := spine.New(ctx, benchManifest(), opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		r.Close(ctx)
		runtime.GC()
		debug.FreeOSMemory()
	}()
	req := benchRequest()
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
	if err := benchWaitPool(ctx, r, 0); err != nil {
		return nil, err
	}
	warmup := min(max(runs/10, 2), 30)
	for i := 0; i < warmup; i++ {
		if err := once(); err != nil {
			return nil, err
		}
	}
	if err := benchWaitPool(ctx, r, 0); err != nil {
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
	m := &benchMode{Mode: mode, Start: stats.Start.String(), PoolSize: stats.PoolSize, Latency: benchSummarize(samples), RunsPerSec: map[int]float64{}}
	for _, c := range benchConcurrency {
		if err := benchWaitPool(ctx, r, 0); err != nil {
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
	m.RSSMiB = float64(benchProcStatus()["VmRSS"]) / 1024
	return m, nil
}

// benchWaitPool waits until r's pool holds want instances (0: its full size), so
// a measurement does not start while the pool is still being filled.
func benchWaitPool(ctx context.Context, r *spine.Runner, want int) error {
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

func benchMeasureToolCall(ctx context.Context, runs int) (*benchToolCall, error) {
	r, err := spine.New(ctx, benchManifest(), nil)
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	var tool, plain, diff []time.Duration
	for i := 0; i < runs+1; i++ {
		out, err := r.Run(ctx, spine.Request{Source: benchToolCallSource})
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
	us := func(s []time.Duration) float64 { return benchSummarize(s).P50 * 1000 }
	best := slices.Min(diff)
	return &benchToolCall{Runs: runs, CallUs: us(diff), BestUs: float64(best) / float64(time.Microsecond), ToolUs: us(tool), PlainUs: us(plain)}, nil
}

// benchMeasureMemory fills a pool of n instances and reads the process's memory:
// before New, as the pool fills, with the pool full, and after every instance
// ran the program once.
func benchMeasureMemory(ctx context.Context, n int) (*benchMemory, error) {
	runtime.GC()
	debug.FreeOSMemory()
	m := &benchMemory{Instances: n, Before: benchSnapMemory()}
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
		return lookup(ctx, args)
	}
	r, err := spine.New(ctx, spine.Manifest{"lookup": {Call: barrier}}, &spine.Options{PoolSize: n})
	if err != nil {
		return nil, err
	}
	defer func() {
		r.Close(ctx)
		runtime.GC()
		debug.FreeOSMemory()
	}()
	if err := benchWaitPool(ctx, r, 1); err != nil {
		return nil, err
	}
	m.FirstReady = r.Stats().PoolReady
	m.First = benchSnapMemory()
	if err := benchWaitPool(ctx, r, n); err != nil {
		return nil, err
	}
	m.FillMs = benchMS(time.Since(start))
	m.Idle = benchSnapMemory()
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
			out, err := r.Run(runCtx, benchRequest())
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
	if err := benchWaitPool(ctx, r, n); err != nil {
		return nil, err
	}
	m.Ran = benchSnapMemory()
	m.RanExtraKiB = (m.Ran.RSSMiB - m.Idle.RSSMiB) * 1024 / float64(n)
	return m, nil
}

// benchProcStatus reads the kB fields of /proc/self/status (VmRSS, VmHWM, ...).
func benchProcStatus() map[string]int64 { return benchReadKB("/proc/self/status") }

// benchSmapsRollup reads /proc/self/smaps_rollup (Rss, Pss, Private_Dirty, ...), in kB.
func benchSmapsRollup() map[string]int64 { return benchReadKB("/proc/self/smaps_rollup") }

func benchReadKB(path string) map[string]int64 {
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

// benchGuestMappings finds each instance's linear memory in /proc/self/smaps — the
// image's memfd mapped privately, and the anonymous mapping right after it —
// and returns how many there are with their total Rss and Private_Dirty, in kB.
func benchGuestMappings() (count int, rss, dirty int64) {
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

func benchCPUModel() string {
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

// benchNativeScript runs the program in-process n times after a warm-up, with
// fresh globals and a Python lookup equivalent to the Go tool, and prints the
// per-run times in ns: exec of the program compiled once, and compile + exec
// (the Guest compiles the source of every run).
const benchNativeScript = `import sys, time, json, builtins
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

// benchSubprocessScript is the program as one python3 process runs it.
const benchSubprocessScript = `PRICES = {"book": 21, "pen": 2}
def lookup(*, key):
    try:
        return PRICES[key]
    except KeyError:
        raise RuntimeError("no such key: %r" % (key,)) from None
inputs = {"quantity": 3}
` + benchSource + `print(result)
`

func benchMeasureNative(ctx context.Context, cfg benchConfig) (*benchNative, error) {
	out, err := exec.CommandContext(ctx, cfg.python, "-c", benchNativeScript,
		strconv.Itoa(cfg.runs), strconv.Itoa(max(cfg.runs/3, 100)), benchSource).Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.python, err)
	}
	var native struct {
		Version     string  `json:"version"`
		Exec        []int64 `json:"exec"`
		CompileExec []int64 `json:"compile_exec"`
	}
	if err := json.Unmarshal(out, &native); err != nil {
		return nil, fmt.Errorf("%s printed %q: %v", cfg.python, out, err)
	}
	durations := func(ns []int64) []time.Duration {
		d := make([]time.Duration, len(ns))
		for i, v := range ns {
			d[i] = time.Duration(v)
		}
		return d
	}
	n := &benchNative{Python: cfg.python, Version: native.Version,
		Exec: benchSummarize(durations(native.Exec)), CompileExec: benchSummarize(durations(native.CompileExec))}

	var samples []time.Duration
	for i := 0; i < cfg.procRuns+1; i++ {
		cmd := exec.CommandContext(ctx, cfg.python, "-c", benchSubprocessScript)
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
	n.Subprocess = benchSummarize(samples)
	return n, nil
}

// benchMeasureColdStart times process start to first result by running this
// binary again ("spine bench first-run"): coldRuns times with an empty cache
// folder each (compiling the Guest and capturing its image), then warmRuns
// times with the last of those folders (both caches on disk).
func benchMeasureColdStart(ctx context.Context, coldRuns, warmRuns int) (*benchCold, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &benchCold{}
	var dir string
	for i := 0; i < coldRuns; i++ {
		if dir != "" {
			os.RemoveAll(dir)
		}
		if dir, err = os.MkdirTemp("", "spine-bench-cache-"); err != nil {
			return nil, err
		}
		t, err := benchStartChild(ctx, exe, dir)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.Cold = append(c.Cold, t)
	}
	defer os.RemoveAll(dir)
	for i := 0; i < warmRuns; i++ {
		t, err := benchStartChild(ctx, exe, dir)
		if err != nil {
			return nil, err
		}
		c.Warm = append(c.Warm, t)
	}
	pick := func(ts []benchChildTiming, f func(benchChildTiming) float64) benchStats {
		d := make([]time.Duration, len(ts))
		for i, t := range ts {
			d[i] = time.Duration(f(t) * float64(time.Millisecond))
		}
		return benchSummarize(d)
	}
	c.ColdFirst = pick(c.Cold, func(t benchChildTiming) float64 { return t.FirstResultMs })
	c.WarmFirst = pick(c.Warm, func(t benchChildTiming) float64 { return t.FirstResultMs })
	c.WarmExit = pick(c.Warm, func(t benchChildTiming) float64 { return t.ExitMs })
	c.WarmNew = pick(c.Warm, func(t benchChildTiming) float64 { return t.NewMs })
	c.WarmRun = pick(c.Warm, func(t benchChildTiming) float64 { return t.RunMs })
	return c, nil
}

// benchStartChild runs "exe bench first-run -cache dir" and times it: from just
// before the process is started to the line with its result, and to its exit.
func benchStartChild(ctx context.Context, exe, dir string) (benchChildTiming, error) {
	cmd := exec.CommandContext(ctx, exe, "bench", "first-run", "-cache", dir)
	cmd.Env = append(os.Environ(), benchChildEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return benchChildTiming{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return benchChildTiming{}, err
	}
	line, readErr := bufio.NewReader(pipe).ReadString('\n')
	first := time.Since(start)
	io.Copy(io.Discard, pipe)
	waitErr := cmd.Wait()
	exit := time.Since(start)
	if waitErr != nil || readErr != nil {
		return benchChildTiming{}, fmt.Errorf("%s bench first-run: %v %v: %s", exe, waitErr, readErr, stderr.String())
	}
	var child struct {
		Value string  `json:"value"`
		NewMs float64 `json:"new_ms"`
		RunMs float64 `json:"run_ms"`
	}
	if err := json.Unmarshal([]byte(line), &child); err != nil || child.Value != "63" {
		return benchChildTiming{}, fmt.Errorf("bench first-run printed %q (%v)", line, err)
	}
	return benchChildTiming{FirstResultMs: benchMS(first), ExitMs: benchMS(exit), NewMs: child.NewMs, RunMs: child.RunMs}, nil
}

// benchFirstRun is the child of benchMeasureColdStart: New with the given cache
// folder and the defaults otherwise, one run, one line with the result.
func benchFirstRun(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("spine bench first-run", flag.ContinueOnError)
	flags.SetOutput(stderr)
	dir := flags.String("cache", "", "cache folder")
	if err := flags.Parse(args); err != nil || *dir == "" {
		fmt.Fprintln(stderr, "usage: spine bench first-run -cache DIR")
		return 2
	}
	ctx := context.Background()
	start := time.Now()
	r, err := spine.New(ctx, benchManifest(), &spine.Options{CacheDir: *dir})
	if err != nil {
		fmt.Fprintln(stderr, "spine:", err)
		return 1
	}
	made := time.Now()
	out, err := r.Run(ctx, benchRequest())
	if err != nil {
		fmt.Fprintln(stderr, "spine:", err)
		return 1
	}
	done := time.Now()
	fmt.Fprintf(stdout, "{\"value\":%q,\"new_ms\":%.3f,\"run_ms\":%.3f}\n", out.Value, benchMS(made.Sub(start)), benchMS(done.Sub(made)))
	if f, ok := stdout.(*os.File); ok {
		f.Sync()
	}
	r.Close(ctx)
	return 0
}

func (r *benchReport) mode(name string) *benchMode {
	for i := range r.Modes {
		if r.Modes[i].Mode == name && r.Modes[i].Error == "" {
			return &r.Modes[i]
		}
	}
	return nil
}

// benchAssess computes the ratios and checks the targets of issue 4.
func benchAssess(r *benchReport) ([]benchRatio, []benchTarget) {
	var ratios []benchRatio
	add := func(name string, a, b float64) {
		if a > 0 && b > 0 {
			ratios = append(ratios, benchRatio{name, a / b})
		}
	}
	pool := r.mode("pool")
	if pool != nil && r.Native != nil {
		add("pool p50 / native compile+exec p50", pool.Latency.P50, r.Native.CompileExec.P50)
		add("pool p50 / native exec p50", pool.Latency.P50, r.Native.Exec.P50)
		add("python3 subprocess p50 / pool p50", r.Native.Subprocess.P50, pool.Latency.P50)
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

	var targets []benchTarget
	check := func(name, figure string, value float64, measured, met bool) {
		t := benchTarget{Name: name, Figure: figure, Value: value}
		if measured {
			t.Met = &met
		}
		targets = append(targets, t)
	}
	var poolP50, poolRate2 float64
	if pool != nil {
		poolP50, poolRate2 = pool.Latency.P50, pool.RunsPerSec[2]
	}
	check("warm run p50 ≤ 0.3 ms", fmt.Sprintf("%.3f ms", poolP50), poolP50, pool != nil, poolP50 <= 0.3)
	var vsNative, vsProc float64
	if pool != nil && r.Native != nil {
		vsNative = poolP50 / r.Native.CompileExec.P50
		vsProc = r.Native.Subprocess.P50 / poolP50
	}
	check("warm run p50 ≤ 10× native in-process (compile+exec)", fmt.Sprintf("%.1f×", vsNative), vsNative, vsNative > 0, vsNative <= 10)
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
	return ratios, targets
}

func benchPrint(w io.Writer, r *benchReport) {
	fmt.Fprintf(w, "spine bench  %s  %s, %s, %d CPUs (GOMAXPROCS %d), %s\n", r.Date, r.Platform, r.CPU, r.NumCPU, r.GOMAXPROCS, r.GoVersion)
	fmt.Fprintf(w, "program (inputs {\"quantity\": 3}, lookup(key=\"book\") = 21):\n%s\n", indent(r.Program))

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
		rows = append(rows, row{m.Mode, []string{strconv.Itoa(m.Latency.N), benchF3(m.Latency.P50), benchF3(m.Latency.P95), benchF3(m.Latency.P99),
			benchF0(m.RunsPerSec[1]), benchF0(m.RunsPerSec[2]), benchF0(m.RunsPerSec[4]), benchF0(m.RSSMiB)}})
	}
	if n := r.Native; n != nil {
		name := filepath.Base(n.Python) + " " + n.Version
		rows = append(rows,
			row{"native " + name + " in-process, exec", []string{strconv.Itoa(n.Exec.N), benchF4(n.Exec.P50), benchF4(n.Exec.P95), benchF4(n.Exec.P99)}},
			row{"native " + name + " in-process, compile+exec", []string{strconv.Itoa(n.CompileExec.N), benchF4(n.CompileExec.P50), benchF4(n.CompileExec.P95), benchF4(n.CompileExec.P99)}},
			row{name + " subprocess per run", []string{strconv.Itoa(n.Subprocess.N), benchF3(n.Subprocess.P50), benchF3(n.Subprocess.P95), benchF3(n.Subprocess.P99)}})
	}
	width := len("mode")
	for _, x := range rows {
		width = max(width, len(x.name))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\truns\tp50 ms\tp95 ms\tp99 ms\truns/s c=1\tc=2\tc=4\tRSS MiB\t\n", width, "mode (latency at concurrency 1)")
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
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nratios (p50s measured in this command):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, x := range r.Ratios {
			fmt.Fprintf(tw, "  %s\t%.1f×\n", x.Name, x.Value)
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\ntargets (issue 4):")
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
