package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for spine when bench re-runs itself
// to time a cold start ("spine bench first-run -cache DIR").
func TestMain(m *testing.M) {
	if os.Getenv(benchChildEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestBench runs the whole benchmark with tiny counts and checks that every
// row, section and target is there with figures.
func TestBench(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the Guest from scratch for the cold start (seconds)")
	}
	python := benchFindPython()
	if python == "" {
		python = "none"
	}
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "-runs", "3", "-fresh-runs", "1", "-proc-runs", "1", "-toolcall-runs", "1",
		"-instances", "4", "-cold-runs", "1", "-warm-runs", "1", "-python", python}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	want := []string{
		`(?m)^\s+fresh\s+1\s+\d+\.\d{3}\s+\d+\.\d{3}\s+\d+\.\d{3}\s+\d+\s+\d+\s+\d+\s+\d+\s*$`,
		`(?m)^\s+copy\s+3\s+\d+\.\d{3}\s+\d+\.\d{3}\s+\d+\.\d{3}\s+\d+\s+\d+\s+\d+\s+\d+\s*$`,
		`(?m)^\s+pool\s+3\s+\d+\.\d{3}\s+\d+\.\d{3}\s+\d+\.\d{3}\s+\d+\s+\d+\s+\d+\s+\d+\s*$`,
		`(?m)^tool call: \d+\.\d+ µs per call \(lookup \d+\.\d+ µs − plain Python call \d+\.\d+ µs`,
		`(?m)^memory, a pool of 4 `,
		`per instance linear memory \(smaps, 4 / 4 instances found\)`,
		`(?m)^  empty cache folder: \d+ ms \(New \d+ ms`,
		`(?m)^  warm caches, median of 1: \d+ ms`,
		`(?m)^  warm run p50 ≤ 0\.3 ms\s+\d+\.\d{3} ms\s+(met|MISSED)$`,
		`(?m)^  one tool call ≤ 15 µs\s+\d+\.\d µs\s+(met|MISSED)$`,
		`(?m)^  ≥ 2,000 runs/s at concurrency 2\s+\d+ runs/s\s+(met|MISSED)$`,
		// 4 instances, not 64: the memory target is not measured.
		`(?m)^  64 idle warm instances ≤ 512 MiB RSS\s+—\s+not measured$`,
		`(?m)^  first result in a new process ≤ 150 ms, warm caches\s+\d+ ms\s+(met|MISSED)$`,
	}
	if benchCOWHere() {
		want = append(want, `(?m)^\s+cow\s+3\s+\d+\.\d{3}`)
	}
	if python != "none" {
		want = append(want,
			`(?m)^\s+native python3[.\d]* [\d.]+ in-process, exec\s+3\s+\d+\.\d{4}`,
			`(?m)^\s+native python3[.\d]* [\d.]+ in-process, compile\+exec\s+3\s+\d+\.\d{4}`,
			`(?m)^\s+python3[.\d]* [\d.]+ subprocess per run\s+1\s+\d+\.\d{3}`,
			`(?m)^  pool p50 / native compile\+exec p50\s+\d+\.\d×$`,
			`(?m)^  python3 subprocess p50 / pool p50\s+\d+\.\d×$`,
			`(?m)^  ≥ 30× faster than a python3 subprocess per run\s+\d+\.\d×\s+(met|MISSED)$`,
		)
	}
	for _, pattern := range want {
		if !regexp.MustCompile(pattern).MatchString(out) {
			t.Errorf("output lacks %s", pattern)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// benchCOWHere: copy-on-write images need Linux.
func benchCOWHere() bool { return runtime.GOOS == "linux" }

// TestBenchJSON checks the machine-readable report of a short run.
func TestBenchJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "-json", "-modes", "pool", "-runs", "4", "-toolcall-runs", "1",
		"-instances", "0", "-cold-runs", "0", "-python", "none"}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var report benchReport
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	if len(report.Modes) != 1 || report.Modes[0].Mode != "pool" {
		t.Fatalf("modes: %+v", report.Modes)
	}
	m := report.Modes[0]
	if m.Latency.N != 4 || m.Latency.P50 <= 0 || m.Latency.P50 > m.Latency.P99 {
		t.Errorf("latency: %+v", m.Latency)
	}
	for _, c := range benchConcurrency {
		if m.RunsPerSec[c] <= 0 {
			t.Errorf("no runs/s at concurrency %d: %v", c, m.RunsPerSec)
		}
	}
	if report.ToolCall == nil || report.ToolCall.ToolUs <= 0 {
		t.Errorf("tool call: %+v", report.ToolCall)
	}
	if report.Native != nil || report.Memory != nil || report.ColdStart != nil {
		t.Errorf("skipped sections were measured: %+v", report)
	}
	if len(report.Targets) != 7 {
		t.Fatalf("%d targets, want 7", len(report.Targets))
	}
	measured := map[string]bool{}
	for _, tg := range report.Targets {
		measured[tg.Name] = tg.Met != nil
	}
	for name, want := range map[string]bool{
		"warm run p50 ≤ 0.3 ms":                               true,
		"one tool call ≤ 15 µs":                               true,
		"≥ 2,000 runs/s at concurrency 2":                     true,
		"≥ 30× faster than a python3 subprocess per run":      false, // -python none
		"64 idle warm instances ≤ 512 MiB RSS":                false, // -instances 0
		"first result in a new process ≤ 150 ms, warm caches": false, // -cold-runs 0
	} {
		if got, ok := measured[name]; !ok || got != want {
			t.Errorf("target %q: measured %v (present %v), want %v", name, got, ok, want)
		}
	}
}

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "-modes", "pool,warp"},
		{"bench", "-runs", "0"},
		{"bench", "extra"},
		{"bench", "first-run"}, // no -cache
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"bench", "-h"}, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "-runs") {
		t.Errorf("bench -h: exit %d, %q", code, stderr.String())
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(101-i)*time.Millisecond) // unsorted
	}
	s := benchSummarize(d)
	if s.N != 100 || s.P50 != 50 || s.P95 != 95 || s.P99 != 99 {
		t.Fatalf("nearest-rank percentiles of 1..100 ms: %+v", s)
	}
	if s := benchSummarize([]time.Duration{7 * time.Millisecond}); s.P50 != 7 || s.P99 != 7 {
		t.Fatalf("one sample: %+v", s)
	}
}

// TestAssess checks the targets' verdicts and ratios on made-up figures.
func TestAssess(t *testing.T) {
	r := &benchReport{
		Modes: []benchMode{
			{Mode: "cow", Latency: benchStats{P50: 1.0}},
			{Mode: "pool", Latency: benchStats{P50: 0.25}, RunsPerSec: map[int]float64{1: 4000, 2: 1500, 4: 1500}},
		},
		Native:    &benchNative{CompileExec: benchStats{P50: 0.02}, Exec: benchStats{P50: 0.001}, Subprocess: benchStats{P50: 10}},
		ToolCall:  &benchToolCall{CallUs: 14},
		Memory:    &benchMemory{Instances: 64, Idle: benchMemSnap{RSSMiB: 300}, Ran: benchMemSnap{RSSMiB: 600}},
		ColdStart: &benchCold{Warm: []benchChildTiming{{}}, WarmFirst: benchStats{P50: 100}},
	}
	ratios, targets := benchAssess(r)
	verdict := map[string]bool{}
	for _, tg := range targets {
		if tg.Met == nil {
			t.Errorf("target %q not measured", tg.Name)
			continue
		}
		verdict[tg.Name] = *tg.Met
	}
	for name, want := range map[string]bool{
		"warm run p50 ≤ 0.3 ms":                               true,
		"warm run p50 ≤ 10× native in-process (compile+exec)": false, // 12.5×
		"≥ 30× faster than a python3 subprocess per run":      true,  // 40×
		"one tool call ≤ 15 µs":                               true,
		"≥ 2,000 runs/s at concurrency 2":                     false,
		"64 idle warm instances ≤ 512 MiB RSS":                false, // 600 MiB after a run each
		"first result in a new process ≤ 150 ms, warm caches": true,
	} {
		if got, ok := verdict[name]; !ok || got != want {
			t.Errorf("target %q: met %v (present %v), want %v", name, got, ok, want)
		}
	}
	got := map[string]float64{}
	for _, x := range ratios {
		got[x.Name] = x.Value
	}
	if got["cow p50 / pool p50"] != 4 || got["python3 subprocess p50 / pool p50"] != 40 {
		t.Errorf("ratios: %v", got)
	}
}
