// Package soak drives one spine.Runner through many mixed runs at once and
// checks that every run got exactly its own outcome and that the process
// gives back what it took: goroutines, descriptors, memory mappings. It backs
// `spine soak` and its test.
package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spine-run/spine"
)

// Config says how much to run. Zero fields take the defaults.
type Config struct {
	Runs        int           // mixed runs in all; default 30,000
	Concurrency int           // runs at once, 2–4 is the point; default 3
	Flood       time.Duration // the descriptor-flood run's length; 0 skips it
	MemoryLimit uint64        // the Runner's; default 256 MiB
	Progress    io.Writer     // a line every 10% of the runs; nil for none
}

// Resources is what the process holds at one moment.
type Resources struct {
	Goroutines int
	FDs        int   // entries in /proc/self/fd
	Mappings   int   // lines in /proc/self/maps
	Threads    int   // OS threads
	RSS        int64 // bytes, VmRSS
}

func (r Resources) String() string {
	return fmt.Sprintf("goroutines %d, fds %d, mappings %d, threads %d, RSS %.1f MiB", r.Goroutines, r.FDs, r.Mappings, r.Threads, float64(r.RSS)/(1<<20))
}

// Report is what a soak saw.
type Report struct {
	Runs     int
	ByKind   map[string]int
	Time     map[string]time.Duration // the runs' summed wall time, by kind
	Failures []string                 // runs whose outcome was not their own expected one (the first 20)
	Failed   int
	Elapsed  time.Duration

	Before    Resources // before New
	Loaded    Resources // after the runs, the Runner still open
	After     Resources // after Close
	PeakRSS   int64     // sampled during the runs
	Instances int64     // Guests the Runner made

	FloodCycles   int   // the flood run's open-until-EMFILE cycles
	FloodPeakRSS  int64 // sampled during the flood run
	FloodStartRSS int64 // just before it
}

// kind is one sort of run: the program, how the request is made, and the
// check of its outcome, for the run's own number n.
type kind struct {
	name    string
	weight  int
	request func(n int) spine.Request
	check   func(n int, out *spine.Output, err error) error
}

func wantValue(want string) func(n int, out *spine.Output, err error) error {
	return func(n int, out *spine.Output, err error) error {
		w := strings.ReplaceAll(want, "N", strconv.Itoa(n))
		if err != nil {
			return fmt.Errorf("err %v, want value %s", err, w)
		}
		if string(out.Value) != w {
			return fmt.Errorf("value %s, want %s", out.Value, w)
		}
		return nil
	}
}

func wantPython(typ, msg string) func(n int, out *spine.Output, err error) error {
	return func(n int, out *spine.Output, err error) error {
		var pe *spine.PythonError
		m := strings.ReplaceAll(msg, "N", strconv.Itoa(n))
		if !errors.As(err, &pe) || pe.Type != typ || !strings.Contains(pe.Message, m) {
			return fmt.Errorf("err %v, want %s containing %q", err, typ, m)
		}
		return nil
	}
}

func inputs(n int) map[string]int { return map[string]int{"n": n} }

func program(src string) func(n int) spine.Request {
	return func(n int) spine.Request { return spine.Request{Source: src, Inputs: inputs(n)} }
}

// kinds are the mixed runs: ordinary, failing in every way a run can fail,
// and abusing the Guest's state; each checks it got its own n back.
func kinds(maxFDs int) []kind {
	return []kind{
		{"ok", 300, program("print(inputs['n'])\nresult = mul(a=inputs['n'], b=3) + 1"),
			func(n int, out *spine.Output, err error) error {
				if err := wantValue(strconv.Itoa(3*n+1))(n, out, err); err != nil {
					return err
				}
				if out.Stdout != fmt.Sprintf("%d\n", n) {
					return fmt.Errorf("stdout %q, want %d", out.Stdout, n)
				}
				return nil
			}},
		{"early reads", 100, func(n int) spine.Request {
			return spine.Request{Source: "a = mul(a=inputs['n'], b=2)\nb = mul(a=inputs['n'], b=5)\nresult = [a + b, inputs['n']]", Inputs: inputs(n), EarlyReads: true}
		}, func(n int, out *spine.Output, err error) error {
			return wantValue(fmt.Sprintf("[%d,N]", 7*n))(n, out, err)
		}},
		{"python error", 100, program("raise ValueError(str(inputs['n']))"), wantPython("ValueError", "N")},
		{"tool error", 100, program("try:\n    fail(msg=str(inputs['n']))\nexcept RuntimeError as e:\n    result = str(e)"),
			func(n int, out *spine.Output, err error) error { return wantValue(`"N failed"`)(n, out, err) }},
		{"time-out", 40, func(n int) spine.Request {
			return spine.Request{Source: "while True:\n    pass", Inputs: inputs(n), Timeout: 5 * time.Millisecond}
		}, func(n int, out *spine.Output, err error) error {
			if !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("err %v, want a time-out", err)
			}
			return nil
		}},
		{"memory bomb", 40, program("x = bytearray(1 << 30)"), wantPython("MemoryError", "")},
		{"exit", 30, program("import os\nos._exit(inputs['n'] % 100)"),
			func(n int, out *spine.Output, err error) error {
				return wantPython("SystemExit", fmt.Sprintf("os._exit(%d)", n%100))(n, out, err)
			}},
		{"close std descriptors", 50, program("import os\nos.close(inputs['n'] % 4)\nresult = inputs['n']"), wantValue("N")},
		{"descriptor flood", 50, program("import os\nfds = []\ntry:\n    while True:\n        fds.append(os.open('/usr/local/lib', os.O_RDONLY))\nexcept OSError as e:\n    result = [inputs['n'], len(fds), e.errno]"),
			wantValue(fmt.Sprintf("[N,%d,33]", maxFDs))},
		{"descriptor left open", 50, program("import os\nresult = [inputs['n'], os.open('/usr/local/lib', os.O_RDONLY)]"), wantValue("[N,5]")},
		{"session", 30, nil, func(n int, out *spine.Output, err error) error {
			return wantValue(fmt.Sprintf("[%d,%d,%d,false]", n, 2*n, 3*n))(n, out, err)
		}},
		{"stack overflow", 1, program("import sys, json\nsys.setrecursionlimit(10**7)\nx = []\nfor _ in range(5 * 10**5):\n    x = [x]\njson.dumps(x)"),
			wantPython("RecursionError", "")},
	}
}

// session takes a session through its life while pooled runs go on: runs
// that build on each other, a snapshot restored into a second session,
// hibernation and waking. Its last run checks the state is the session's own.
func session(ctx context.Context, r *spine.Runner, n int) (*spine.Output, error) {
	s, err := r.NewSession(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close(ctx)
	in := inputs(n)
	for _, src := range []string{"n = inputs['n']\nacc = [n]", "acc.append(mul(a=n, b=2))"} {
		if _, err := s.Run(ctx, spine.Request{Source: src, Inputs: in}); err != nil {
			return nil, err
		}
	}
	blob, err := s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	restored, err := r.Restore(ctx, blob)
	if err != nil {
		return nil, err
	}
	defer restored.Close(ctx)
	if err := restored.Hibernate(ctx); err != nil {
		return nil, err
	}
	return restored.Run(ctx, spine.Request{Source: "acc.append(n * 3)\nresult = acc + ['fds' in globals()]"})
}

func manifest() spine.Manifest {
	return spine.Manifest{
		"mul": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			var a struct{ A, B int }
			if err := json.Unmarshal(args, &a); err != nil {
				return nil, err
			}
			return a.A * a.B, nil
		}, AllowEarlyRead: true},
		"fail": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			var a struct{ Msg string }
			json.Unmarshal(args, &a)
			return nil, errors.New(a.Msg + " failed")
		}},
	}
}

// Run soaks a new Runner and reports. An error means the soak itself could
// not run; failed runs are in the Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Runs <= 0 {
		cfg.Runs = 30000
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 3
	}
	if cfg.MemoryLimit == 0 {
		cfg.MemoryLimit = 256 << 20
	}
	const maxFDs = 64
	rep := &Report{ByKind: map[string]int{}, Time: map[string]time.Duration{}}
	rep.Before = Measure()
	r, err := spine.New(ctx, manifest(), &spine.Options{MemoryLimit: cfg.MemoryLimit, PoolSize: cfg.Concurrency, MaxDescriptors: maxFDs})
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			r.Close(context.Background())
		}
	}()

	var peak atomic.Int64
	stopSampling := sample(&peak)
	table := kinds(maxFDs)
	var weights []int
	for i, k := range table {
		for w := 0; w < k.weight; w++ {
			weights = append(weights, i)
		}
	}
	var (
		next    atomic.Int64
		mu      sync.Mutex
		wg      sync.WaitGroup
		started = time.Now()
	)
	for g := 0; g < cfg.Concurrency; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Runs || ctx.Err() != nil {
					return
				}
				// A multiplicative hash spreads the kinds over the runs and
				// the goroutines without a shared random source.
				k := table[weights[(i*2654435761)%len(weights)]]
				n := i + 1
				began := time.Now()
				var out *spine.Output
				var err error
				if k.request == nil { // the one kind that is more than a run
					out, err = session(ctx, r, n)
				} else {
					out, err = r.Run(ctx, k.request(n))
				}
				took := time.Since(began)
				failure := k.check(n, out, err)
				mu.Lock()
				rep.Runs++
				rep.ByKind[k.name]++
				rep.Time[k.name] += took
				if failure != nil {
					rep.Failed++
					if len(rep.Failures) < 20 {
						rep.Failures = append(rep.Failures, fmt.Sprintf("run %d (%s): %v", n, k.name, failure))
					}
				}
				if cfg.Progress != nil && rep.Runs%(max(cfg.Runs/10, 1)) == 0 {
					fmt.Fprintf(cfg.Progress, "%d runs, %d failed, %s\n", rep.Runs, rep.Failed, Measure())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rep.Elapsed = time.Since(started)
	stopSampling()
	rep.PeakRSS = peak.Load()

	if cfg.Flood > 0 && ctx.Err() == nil {
		if err := flood(ctx, r, cfg.Flood, rep); err != nil {
			return nil, err
		}
	}
	rep.Instances = r.Stats().InstancesMade
	rep.Loaded = Measure()
	if err := r.Close(context.Background()); err != nil {
		return nil, err
	}
	closed = true
	rep.After = Settle(rep.Before)
	return rep, ctx.Err()
}

// flood runs one program that, for d, opens directories until it is refused
// (EMFILE), closes them all and starts again, while the process's RSS is
// sampled: the Host memory a run's descriptors take is bounded by
// MaxDescriptors, however long it tries.
func flood(ctx context.Context, r *spine.Runner, d time.Duration, rep *Report) error {
	runtime.GC()
	rep.FloodStartRSS = Measure().RSS
	var peak atomic.Int64
	stop := sample(&peak)
	defer stop()
	src := `import os, time
end = time.monotonic() + inputs["seconds"]
cycles = 0
while time.monotonic() < end:
    fds = []
    try:
        while True:
            fds.append(os.open("/usr/local/lib", os.O_RDONLY))
    except OSError:
        pass
    for fd in fds:
        os.close(fd)
    cycles += 1
result = cycles`
	out, err := r.Run(ctx, spine.Request{Source: src, Inputs: map[string]float64{"seconds": d.Seconds()}})
	if err != nil {
		return fmt.Errorf("the flood run: %w", err)
	}
	stop()
	rep.FloodPeakRSS = peak.Load()
	rep.FloodCycles, err = strconv.Atoi(string(out.Value))
	return err
}

// sample records the highest RSS seen until the returned func is called.
func sample(peak *atomic.Int64) (stop func()) {
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ticker := time.NewTicker(50 * time.Millisecond)
		defer ticker.Stop()
		for {
			if rss := Measure().RSS; rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-done:
				return
			case <-ticker.C:
			}
		}
	}()
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// Measure reads the process's goroutines, descriptors, mappings and RSS.
func Measure() Resources {
	var res Resources
	res.Goroutines = runtime.NumGoroutine()
	if entries, err := os.ReadDir("/proc/self/fd"); err == nil {
		res.FDs = len(entries)
	}
	if data, err := os.ReadFile("/proc/self/maps"); err == nil {
		res.Mappings = bytes.Count(data, []byte("\n"))
	}
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				res.RSS = kb << 10
			}
			if rest, ok := strings.CutPrefix(line, "Threads:"); ok {
				res.Threads, _ = strconv.Atoi(strings.TrimSpace(rest))
			}
		}
	}
	return res
}

// Settle measures again until goroutines, descriptors and mappings are back
// to before or a few garbage collections have passed: goroutines that ended
// may not have been reaped yet, and finalizers release what wazero held.
func Settle(before Resources) Resources {
	var now Resources
	for i := 0; i < 50; i++ {
		runtime.GC()
		now = Measure()
		if now.Goroutines <= before.Goroutines && now.FDs <= before.FDs && now.Mappings <= before.Mappings {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return now
}

// Leaked reports whether the process holds more goroutines, descriptors or
// memory mappings after the Runner closed than before it was made. Mappings
// get slack for what is not the Runner's: the Go heap may have grown by an
// arena or two, and Go never ends an OS thread it started, each of which
// keeps a stack, its guard page and a malloc arena (at most 4 mappings).
func (rep *Report) Leaked() bool {
	b, a := rep.Before, rep.After
	return a.Goroutines > b.Goroutines || a.FDs > b.FDs || a.Mappings > b.Mappings+8+4*max(a.Threads-b.Threads, 0)
}

// Print writes the report as the docs show it.
func (rep *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "runs: %d in %v (%d failed), %d Guests made\n", rep.Runs, rep.Elapsed.Round(time.Millisecond), rep.Failed, rep.Instances)
	for _, k := range kinds(0) {
		mean := time.Duration(0)
		if c := rep.ByKind[k.name]; c > 0 {
			mean = rep.Time[k.name] / time.Duration(c)
		}
		fmt.Fprintf(w, "  %-22s %6d runs, mean %v\n", k.name, rep.ByKind[k.name], mean.Round(time.Microsecond))
	}
	for _, f := range rep.Failures {
		fmt.Fprintln(w, "  FAILED", f)
	}
	fmt.Fprintf(w, "before New:      %s\n", rep.Before)
	fmt.Fprintf(w, "after the runs:  %s (peak RSS during the runs %.1f MiB)\n", rep.Loaded, float64(rep.PeakRSS)/(1<<20))
	fmt.Fprintf(w, "after Close:     %s\n", rep.After)
	if rep.FloodCycles > 0 {
		fmt.Fprintf(w, "descriptor flood: %d open-until-EMFILE cycles; RSS %.1f MiB before, peak %.1f MiB (+%.1f MiB)\n",
			rep.FloodCycles, float64(rep.FloodStartRSS)/(1<<20), float64(rep.FloodPeakRSS)/(1<<20),
			float64(rep.FloodPeakRSS-rep.FloodStartRSS)/(1<<20))
	}
}
