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
		"--instances", "0", "--cold-runs", "0", "--python", "none", "--suites", "modes,toolcall"}
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
		Sessions *struct{}
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	if len(report.Modes) != 1 || report.Modes[0].Mode != "pool" || report.Modes[0].Latency.N != 2 ||
		report.ToolCall == nil || report.ToolCall.Runs != 1 || report.Native != nil || report.Sessions != nil {
		t.Errorf("report: %s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "bench: mode pool: 2 runs") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}
}

// TestBenchSessions runs the sessions suite alone through the flags.
func TestBenchSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("makes sessions, each running an import of statistics")
	}
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "--json", "--suites", "sessions", "--session-runs", "2", "--sessions", "3", "--sessions-on-disk"}
	if code := run(args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var report struct {
		Modes    []struct{}
		ToolCall *struct{} `json:"tool_call"`
		Sessions *struct {
			Pool struct{ N int }
			Held *struct {
				Sessions int
				OnDisk   bool `json:"on_disk"`
				Wake     struct{ N int }
			}
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	ss := report.Sessions
	if len(report.Modes) != 0 || report.ToolCall != nil || ss == nil || ss.Pool.N != 2 || ss.Held == nil ||
		ss.Held.Sessions != 3 || !ss.Held.OnDisk || ss.Held.Wake.N != 2 {
		t.Errorf("report: %s", stdout.String())
	}
}

// TestBenchFailure: a measurement that fails is exit code 4.
func TestBenchFailure(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "--suites", "native", "--python", "/no/such/python3"}
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
		{"bench", "-suites", "sessions,warp"},
		{"bench", "-sessions", "-1"},
		{"bench", "-session-runs", "0"},
		{"bench", "--variant", "/no/such/folder"},
		{"bench", "--variant", ".", "--variant-no-ticks"},
		{"bench", "--variant-no-ticks", "--compute-runs", "0"},
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
