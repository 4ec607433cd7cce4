package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spine-run/spine/guest/data"
	"github.com/spine-run/spine/internal/bench"
)

const benchUsage = `usage: spine bench [flags]

Measures the seed demo's program in each start mode (fresh, copy, cow, pool)
and, in the same command, native python3 executing it in-process and one
python3 process per run: latency percentiles, runs per second at concurrency
1, 2 and 4, the memory of a pool, an empty program pooled against a bare host
(the Guest reused without a reset), the cost of one tool call, compute
workloads in the Guest against native python3, process start to first result
with cold and warm caches, sessions (a run in one, Snapshot,
Restore, and one Runner holding thousands hibernated: its memory and the
wake of one), the ratios and the targets (docs/performance.md). Progress goes
to standard error.

flags:
  --runs N           runs per mode (latency, and each concurrency level), and native in-process runs (default 300)
  --fresh-runs N     runs for the fresh mode, 60–100 ms each (default 20)
  --proc-runs N      python3 subprocess runs (default 50)
  --toolcall-runs N  runs of the 1,000-call loop (default 50)
  --instances N      pooled instances for the memory measurement; 0 skips it (default 64)
  --cold-runs N      process starts with an empty cache folder; 0 skips the cold start (default 1)
  --warm-runs N      process starts with warm caches (default 5)
  --session-runs N   runs of each sessions measurement, and wakes of hibernated sessions (default 300)
  --sessions N       sessions one Runner holds, hibernated, for its memory and wakes; 0 skips that part (default 10000)
  --compute-runs N   runs of each compute workload, in the Guest and natively (default 5)
  --client-calls N   calls of a client tool timed over loopback HTTP, and of a Go tool (default 200)
  --sessions-on-disk  those sessions hibernate to files in a temporary folder (SessionOptions.Dir), not memory
  --suites LIST      what to measure, comma-separated (default memory,native,modes,overhead,toolcall,clienttools,compute,sessions,cold)
                     and numpy, only when named: numpy workloads on the data Guest against native numpy,
                     pooled tiny runs on the data Guest beside the default one, and the image's heap
  --numpy-python PATH  the python3 with numpy 1.24.2 for the numpy suite (default /usr/bin/python3)
  --modes LIST       start modes to measure, comma-separated (default fresh,copy,cow,pool)
  --pool-size N      the pool mode's pool size (default: GOMAXPROCS)
  --python PATH      python3 for the baselines; auto finds one, none skips them (default auto)
  --variant DIR      instead of the suites: the compute suite on the embedded Guest and on the
                     Guest artifact in DIR (spine.wasm and python311.zip), alternating, --compute-runs
                     of each; prints each Guest's best per workload, the ratios (wall time and
                     thread CPU time) and their geometric means, module sizes and New times
  --variant-no-ticks the same against the embedded Guest with its tick checks left out (a Guest
                     that cannot be stopped, built for this measurement only)
  --json             print the report as JSON

exit codes: 0 ok, 2 usage error, 4 a measurement failed or was interrupted
`

// benchOptions are the flags of spine bench.
type benchOptions struct {
	cfg    bench.Config
	modes  string
	suites string
	python string
	json   bool

	variant        string
	variantNoTicks bool
}

func (o *benchOptions) flags(fs *flag.FlagSet) {
	d := bench.DefaultConfig()
	fs.IntVar(&o.cfg.Runs, "runs", d.Runs, "")
	fs.IntVar(&o.cfg.FreshRuns, "fresh-runs", d.FreshRuns, "")
	fs.IntVar(&o.cfg.ProcRuns, "proc-runs", d.ProcRuns, "")
	fs.IntVar(&o.cfg.ToolCallRuns, "toolcall-runs", d.ToolCallRuns, "")
	fs.IntVar(&o.cfg.Instances, "instances", d.Instances, "")
	fs.IntVar(&o.cfg.ColdRuns, "cold-runs", d.ColdRuns, "")
	fs.IntVar(&o.cfg.WarmRuns, "warm-runs", d.WarmRuns, "")
	fs.IntVar(&o.cfg.SessionRuns, "session-runs", d.SessionRuns, "")
	fs.IntVar(&o.cfg.Sessions, "sessions", d.Sessions, "")
	fs.BoolVar(&o.cfg.OnDisk, "sessions-on-disk", d.OnDisk, "")
	fs.IntVar(&o.cfg.ComputeRuns, "compute-runs", d.ComputeRuns, "")
	fs.IntVar(&o.cfg.ClientCalls, "client-calls", d.ClientCalls, "")
	fs.StringVar(&o.suites, "suites", strings.Join(d.Suites, ","), "")
	fs.StringVar(&o.modes, "modes", strings.Join(d.Modes, ","), "")
	fs.IntVar(&o.cfg.PoolSize, "pool-size", d.PoolSize, "")
	fs.StringVar(&o.python, "python", "auto", "")
	fs.StringVar(&o.cfg.NumpyPython, "numpy-python", "/usr/bin/python3", "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.StringVar(&o.variant, "variant", "", "")
	fs.BoolVar(&o.variantNoTicks, "variant-no-ticks", false, "")
}

// benchCommand is spine bench.
func benchCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "first-run" { // one timed process start
		return firstRunCommand(args[1:], stdin, stdout, stderr)
	}
	var o benchOptions
	fs := flag.NewFlagSet("spine bench", flag.ContinueOnError)
	o.flags(fs)
	if _, code, done := parseFlags(fs, args, benchUsage, 0, stdout, stderr); done {
		return code
	}
	if o.variant != "" || o.variantNoTicks {
		return variantCommand(o, stdout, stderr)
	}
	cfg := o.cfg
	cfg.Modes, cfg.Suites = benchList(o.modes), benchList(o.suites)
	if cfg.Suites == nil {
		cfg.Suites = []string{} // --suites "": nothing, not everything
	}
	switch o.python {
	case "none", "":
	case "auto":
		if cfg.Python = bench.FindPython(); cfg.Python == "" {
			fmt.Fprintln(stderr, "spine bench: no python3 found; skipping the baselines")
		}
	default:
		cfg.Python = o.python
	}
	if slices.Contains(cfg.Suites, "numpy") {
		cfg.Data = data.Artifact()
	}
	if slices.Contains(cfg.Suites, "cold") && cfg.ColdRuns > 0 {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "spine bench:", err)
			return exitFailure
		}
		cfg.ColdStartCommand = func(ctx context.Context, cacheDir string) *exec.Cmd {
			return exec.CommandContext(ctx, exe, "bench", "first-run", "--cache", cacheDir)
		}
	}
	if err := cfg.Validate(); err != nil {
		return usageError(stderr, fs.Name(), benchUsage, "%v", err)
	}
	cfg.Progress = stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "spine bench:", err)
		return exitFailure
	}
	if o.json {
		if err := report.WriteJSON(stdout); err != nil {
			fmt.Fprintln(stderr, "spine bench:", err)
			return exitFailure
		}
		return exitOK
	}
	report.Print(stdout)
	return exitOK
}

// variantCommand is spine bench --variant DIR or --variant-no-ticks.
func variantCommand(o benchOptions, stdout, stderr io.Writer) int {
	if o.variant != "" && o.variantNoTicks {
		return usageError(stderr, "spine bench", benchUsage, "--variant and --variant-no-ticks exclude each other")
	}
	if o.cfg.ComputeRuns < 1 {
		return usageError(stderr, "spine bench", benchUsage, "--compute-runs must be positive")
	}
	if o.variant != "" {
		if _, err := bench.LoadVariant(o.variant); err != nil {
			return usageError(stderr, "spine bench", benchUsage, "%v", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	v, err := bench.RunVariant(ctx, bench.VariantConfig{Dir: o.variant, NoTicks: o.variantNoTicks, Runs: o.cfg.ComputeRuns, Progress: stderr})
	if err != nil {
		fmt.Fprintln(stderr, "spine bench:", err)
		return exitFailure
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			fmt.Fprintln(stderr, "spine bench:", err)
			return exitFailure
		}
		return exitOK
	}
	v.Print(stdout)
	return exitOK
}

// benchList splits a comma-separated flag, dropping empty items.
func benchList(s string) []string {
	var items []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}

const firstRunUsage = `usage: spine bench first-run --cache DIR

One of the process starts spine bench times: starts the sandbox with DIR as
its cache folder, runs the benchmark's program once and prints one line of
JSON with the result and the times it took.

flags:
  --cache DIR  the cache folder (required)

exit codes: 0 ok, 2 usage error, 4 other failure
`

// firstRunOptions are the flags of spine bench first-run.
type firstRunOptions struct{ cache string }

func (o *firstRunOptions) flags(fs *flag.FlagSet) { fs.StringVar(&o.cache, "cache", "", "") }

// firstRunCommand is spine bench first-run.
func firstRunCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o firstRunOptions
	fs := flag.NewFlagSet("spine bench first-run", flag.ContinueOnError)
	o.flags(fs)
	if _, code, done := parseFlags(fs, args, firstRunUsage, 0, stdout, stderr); done {
		return code
	}
	if o.cache == "" {
		return usageError(stderr, fs.Name(), firstRunUsage, "--cache is required")
	}
	if err := bench.FirstRun(context.Background(), o.cache, stdout); err != nil {
		fmt.Fprintln(stderr, "spine bench first-run:", err)
		return exitFailure
	}
	return exitOK
}
