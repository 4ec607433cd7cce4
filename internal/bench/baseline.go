package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Native is the baselines: the python3 executing the program in-process,
// and one python3 process per run.
type Native struct {
	Python      string `json:"python"`
	Version     string `json:"version"`
	Exec        Stats  `json:"exec"`         // exec of the compiled program, fresh globals
	CompileExec Stats  `json:"compile_exec"` // compile + exec, as the Guest does
	Subprocess  Stats  `json:"subprocess"`   // one python3 -c process per run
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
