package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchCommand runs spine bench with tiny counts and one mode: the flags
// reach the benchmark (internal/bench tests the report itself).
func TestBenchCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "--json", "--modes", "pool", "--runs", "2", "--toolcall-runs", "1",
		"--instances", "0", "--cold-runs", "0", "--python", "none"}
	if code := run(args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var report struct {
		Modes []struct {
			Mode    string
			Latency struct{ N int }
		}
		ToolCall *struct{ Runs int } `json:"tool_call"`
		Native   *struct{}
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	if len(report.Modes) != 1 || report.Modes[0].Mode != "pool" || report.Modes[0].Latency.N != 2 ||
		report.ToolCall == nil || report.ToolCall.Runs != 1 || report.Native != nil {
		t.Errorf("report: %s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "bench: mode pool: 2 runs") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}
}

// TestBenchFailure: a measurement that fails is exit code 4.
func TestBenchFailure(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "--modes", "pool", "--instances", "0", "--cold-runs", "0", "--python", "/no/such/python3"}
	if code := run(args, &stdout, &stderr); code != exitFailure || !strings.Contains(stderr.String(), "/no/such/python3") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
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
	if code := run([]string{"bench", "-h"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "--runs") {
		t.Errorf("bench -h: exit %d, %q", code, stdout.String())
	}
}
