package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spine-run/spine"
)

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
