package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os/exec"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/engine"
)

// workload is one program of the compute suite: it defines setup(), which
// makes the data, and work(data), the part timed, which returns a value both
// sides must agree on.
type workload struct{ name, source string }

// workloads are the compute suite: pure Python and the C parts of the
// standard library (json, re, sorting, str), no tools, no I/O. Sizes are
// such that native CPython takes tens of milliseconds on each.
var workloads = []workload{
	{"nbody", `import math
def setup():
    PI = 3.14159265358979323
    SOLAR_MASS = 4 * PI * PI
    DAYS_PER_YEAR = 365.24
    bodies = [
        ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], SOLAR_MASS),
        ([4.84143144246472090e+00, -1.16032004402742839e+00, -1.03622044471123109e-01],
         [1.66007664274403694e-03 * DAYS_PER_YEAR, 7.69901118419740425e-03 * DAYS_PER_YEAR, -6.90460016972063023e-05 * DAYS_PER_YEAR],
         9.54791938424326609e-04 * SOLAR_MASS),
        ([8.34336671824457987e+00, 4.12479856412430479e+00, -4.03523417114321381e-01],
         [-2.76742510726862411e-03 * DAYS_PER_YEAR, 4.99852801234917238e-03 * DAYS_PER_YEAR, 2.30417297573763929e-05 * DAYS_PER_YEAR],
         2.85885980666130812e-04 * SOLAR_MASS),
        ([1.28943695621391310e+01, -1.51111514016986312e+01, -2.23307578892655734e-01],
         [2.96460137564761618e-03 * DAYS_PER_YEAR, 2.37847173959480950e-03 * DAYS_PER_YEAR, -2.96589568540237556e-05 * DAYS_PER_YEAR],
         4.36624404335156298e-05 * SOLAR_MASS),
        ([1.53796971148509165e+01, -2.59193146099879641e+01, 1.79258772950371181e-01],
         [2.68067772490389322e-03 * DAYS_PER_YEAR, 1.62824170038242295e-03 * DAYS_PER_YEAR, -9.51592254519715870e-05 * DAYS_PER_YEAR],
         5.15138902046611451e-05 * SOLAR_MASS),
    ]
    px = py = pz = 0.0
    for (r, v, m) in bodies:
        px += v[0] * m; py += v[1] * m; pz += v[2] * m
    v = bodies[0][1]
    v[0] = -px / SOLAR_MASS; v[1] = -py / SOLAR_MASS; v[2] = -pz / SOLAR_MASS
    return bodies

def work(bodies, steps=5000, dt=0.01):
    pairs = [(bodies[i], bodies[j]) for i in range(len(bodies)) for j in range(i + 1, len(bodies))]
    for _ in range(steps):
        for (([x1, y1, z1], v1, m1), ([x2, y2, z2], v2, m2)) in pairs:
            dx = x1 - x2; dy = y1 - y2; dz = z1 - z2
            mag = dt * ((dx * dx + dy * dy + dz * dz) ** (-1.5))
            b1m = m1 * mag; b2m = m2 * mag
            v1[0] -= dx * b2m; v1[1] -= dy * b2m; v1[2] -= dz * b2m
            v2[0] += dx * b1m; v2[1] += dy * b1m; v2[2] += dz * b1m
        for (r, [vx, vy, vz], m) in bodies:
            r[0] += dt * vx; r[1] += dt * vy; r[2] += dt * vz
    e = 0.0
    for i, ((x1, y1, z1), v1, m1) in enumerate(bodies):
        e += m1 * (v1[0] ** 2 + v1[1] ** 2 + v1[2] ** 2) / 2
        for ((x2, y2, z2), v2, m2) in bodies[i + 1:]:
            e -= m1 * m2 / math.sqrt((x1 - x2) ** 2 + (y1 - y2) ** 2 + (z1 - z2) ** 2)
    return "%.9f" % e
`},
	{"fannkuch", `def setup():
    return 8

def work(n):
    count = list(range(1, n + 1))
    max_flips = 0
    m = n - 1
    r = n
    check = 0
    perm1 = list(range(n))
    perm = list(range(n))
    perm1_ins = perm1.insert
    perm1_pop = perm1.pop
    while 1:
        if check < 30:
            check += 1
        while r != 1:
            count[r - 1] = r
            r -= 1
        if perm1[0] != 0 and perm1[m] != m:
            perm = perm1[:]
            flips_count = 0
            k = perm[0]
            while k:
                perm[:k + 1] = perm[k::-1]
                flips_count += 1
                k = perm[0]
            if flips_count > max_flips:
                max_flips = flips_count
        while r != n:
            perm1_ins(r, perm1_pop(0))
            count[r] -= 1
            if count[r] > 0:
                break
            r += 1
        else:
            return max_flips
`},
	{"json", `import json
def setup():
    x = 12345
    items = []
    for i in range(9000):
        x = (x * 1103515245 + 12345) & 0x7fffffff
        items.append({"id": i, "name": "item-%d" % x, "price": x / 1000.0, "tags": ["a", "bb", "ccc"][: x % 4],
                      "ok": x % 2 == 0, "note": None if x % 3 else "caf\u00e9 %d" % (x % 977)})
    return {"items": items, "count": len(items)}

def work(doc):
    out = 0
    text = json.dumps(doc)
    back = json.loads(text)
    return [len(text), len(back["items"])]
`},
	{"regex", `import re
def setup():
    words = ["alpha", "beta", "gamma", "delta", "user@example.com", "2026-12-01", "x=42;", "Hello", "world", "foo_bar"]
    x = 7
    parts = []
    size = 0
    while size < 1 << 20:
        x = (x * 1103515245 + 12345) & 0x7fffffff
        w = words[x % len(words)]
        parts.append(w)
        size += len(w) + 1
    return " ".join(parts)

def work(text):
    emails = re.findall(r"\w+@\w+\.com", text)
    dates = re.findall(r"(\d{4})-(\d{2})-(\d{2})", text)
    subbed = re.sub(r"\d+", "#", text)
    words = len(re.findall(r"\b[A-Z]\w*", text))
    return [len(emails), len(dates), len(subbed), words]
`},
	{"sort", `def setup():
    x = 99
    out = []
    for _ in range(200000):
        x = (x * 1103515245 + 12345) & 0x7fffffff
        out.append(x)
    return out

def work(data):
    a = sorted(data)
    b = sorted(data, reverse=True)
    return [a[0], a[-1], b[100], len(a)]
`},
	{"strings", `def setup():
    return 100000

def work(n):
    parts = []
    for i in range(n):
        parts.append(f"{i}:{i * i};")
    s = "".join(parts)
    t = ""
    for i in range(n // 4):
        t += str(i)
    u = "-".join(str(i).zfill(6).upper() for i in range(n // 4))
    return [len(s), len(t), len(u), s.count("9")]
`},
}

// computeWrap follows a workload's source: it times work(setup()) with the
// Python clock, so only the computation is measured on both sides.
const computeWrap = `
import time as _time
_data = setup()
_t0 = _time.perf_counter_ns()
_check = work(_data)
_t1 = _time.perf_counter_ns()
result = [_t1 - _t0, _check]
`

// computeNativeScript runs the program on its standard input the same way in
// native CPython and prints the result as JSON, with the version.
const computeNativeScript = `import sys, json
g = {"__name__": "__main__"}
exec(compile(sys.stdin.read(), "<agent>", "exec"), g)
print(json.dumps({"version": sys.version.split()[0], "result": g["result"]}))
`

// Compute is the compute suite: each workload in the Guest (a pooled run
// each) and in native CPython (a process each), alternating, Runs times.
type Compute struct {
	Python    string            `json:"python"`
	Version   string            `json:"version"`
	Runs      int               `json:"runs"`
	Workloads []ComputeWorkload `json:"workloads"`
	GeoMean   float64           `json:"geomean_ratio"` // of the workloads' ratios
}

// ComputeWorkload is one workload's times, in ms: the best of its runs. On a
// shared machine other processes only ever add to a computation's time, so
// the fastest run is the one they disturbed least.
type ComputeWorkload struct {
	Name     string  `json:"name"`
	GuestMs  float64 `json:"guest_ms"`
	NativeMs float64 `json:"native_ms"`
	Ratio    float64 `json:"ratio"` // guest / native
}

func measureCompute(ctx context.Context, cfg Config) (*Compute, error) {
	r, err := spine.New(ctx, manifest(), nil)
	if err != nil {
		return nil, err
	}
	defer closeRunner(ctx, r)
	c := &Compute{Python: cfg.Python, Runs: cfg.ComputeRuns}
	guestTimes := make([][]time.Duration, len(workloads))
	nativeTimes := make([][]time.Duration, len(workloads))
	for run := 0; run < cfg.ComputeRuns; run++ {
		for i, w := range workloads {
			program := w.source + computeWrap
			out, err := r.Run(ctx, spine.Request{Source: program})
			if err != nil {
				return nil, fmt.Errorf("%s in the Guest: %w", w.name, err)
			}
			var guestResult [2]json.RawMessage
			if err := json.Unmarshal(out.Value, &guestResult); err != nil {
				return nil, fmt.Errorf("%s in the Guest: result %s: %v", w.name, out.Value, err)
			}
			cmd := exec.CommandContext(ctx, cfg.Python, "-c", computeNativeScript)
			cmd.Stdin = strings.NewReader(program)
			text, err := cmd.Output()
			if err != nil {
				return nil, fmt.Errorf("%s in %s: %w", w.name, cfg.Python, err)
			}
			var native struct {
				Version string             `json:"version"`
				Result  [2]json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal(text, &native); err != nil {
				return nil, fmt.Errorf("%s in %s: printed %q: %v", w.name, cfg.Python, text, err)
			}
			c.Version = native.Version
			if !jsonEqual(guestResult[1], native.Result[1]) {
				return nil, fmt.Errorf("%s: the Guest computed %s, %s computed %s", w.name, guestResult[1], cfg.Python, native.Result[1])
			}
			var g, n int64
			if json.Unmarshal(guestResult[0], &g) != nil || json.Unmarshal(native.Result[0], &n) != nil {
				return nil, fmt.Errorf("%s: times %s and %s", w.name, guestResult[0], native.Result[0])
			}
			guestTimes[i] = append(guestTimes[i], time.Duration(g))
			nativeTimes[i] = append(nativeTimes[i], time.Duration(n))
		}
	}
	logSum := 0.0
	for i, w := range workloads {
		g, n := ms(slices.Min(guestTimes[i])), ms(slices.Min(nativeTimes[i]))
		cw := ComputeWorkload{Name: w.name, GuestMs: g, NativeMs: n}
		if g > 0 && n > 0 {
			cw.Ratio = g / n
			logSum += math.Log(cw.Ratio)
		}
		c.Workloads = append(c.Workloads, cw)
	}
	c.GeoMean = math.Exp(logSum / float64(len(workloads)))
	return c, nil
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

func (c *Compute) print(w io.Writer) {
	fmt.Fprintf(w, "\ncompute (work(setup()) timed inside Python; the Guest a pooled run each, %s %s a process each, alternating; the best of %d):\n",
		c.Python, c.Version, c.Runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  workload\tGuest ms\tnative ms\tGuest / native\t\n")
	for _, x := range c.Workloads {
		fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\t%.2f×\t\n", x.Name, x.GuestMs, x.NativeMs, x.Ratio)
	}
	fmt.Fprintf(tw, "  geometric mean\t\t\t%.2f×\t\n", c.GeoMean)
	tw.Flush()
}

// emptyRequest is the execute request of an empty program, as a Runner with
// an image sends it (the tools are in the image).
var emptyRequest = []byte(`{"source":"","inputs":{},"early_reads":false,"result_limit":1048576}`)

// Overhead is what starting every run from a clean Guest costs: an empty
// program in a pooled run against the same empty program on a bare host —
// the same Guest module under wazero, one instance reused without any reset,
// called with the execute request directly — alternating in blocks.
type Overhead struct {
	Pooled   Stats   `json:"pooled"`
	Bare     Stats   `json:"bare"`
	Overhead float64 `json:"overhead_ms"` // pooled p50 − bare p50
}

// overheadBlock is how many runs of one kind the overhead suite makes in a row.
const overheadBlock = 20

func measureOverhead(ctx context.Context, runs int) (*Overhead, error) {
	r, err := spine.New(ctx, manifest(), nil)
	if err != nil {
		return nil, err
	}
	defer closeRunner(ctx, r)
	bare, err := newBareHost(ctx)
	if err != nil {
		return nil, fmt.Errorf("bare host: %w", err)
	}
	defer bare.close(ctx)
	if err := waitPool(ctx, r, 0); err != nil {
		return nil, err
	}
	pooled := func() error {
		out, err := r.Run(ctx, spine.Request{})
		if err == nil && string(out.Value) != "null" {
			err = fmt.Errorf("result %s, want null", out.Value)
		}
		return err
	}
	warmup := min(max(runs/10, 2), 30)
	for i := 0; i < warmup; i++ {
		if err := pooled(); err != nil {
			return nil, err
		}
		if err := bare.run(ctx); err != nil {
			return nil, err
		}
	}
	// In blocks of overheadBlock of each, alternating, so that each kind
	// runs on a Guest whose pages the runs before it left in the caches
	// (the pool hands out the Guest reset last), and a change of load
	// falls on both.
	var p, b []time.Duration
	for len(p) < runs {
		for i := 0; i < overheadBlock && len(b) < runs; i++ {
			start := time.Now()
			if err := bare.run(ctx); err != nil {
				return nil, err
			}
			b = append(b, time.Since(start))
		}
		for i := 0; i < overheadBlock && len(p) < runs; i++ {
			start := time.Now()
			if err := pooled(); err != nil {
				return nil, err
			}
			p = append(p, time.Since(start))
		}
	}
	o := &Overhead{Pooled: summarize(p), Bare: summarize(b)}
	o.Overhead = o.Pooled.P50 - o.Bare.P50
	return o, nil
}

// bareHost is the embedded Guest on an engine without a Runner, an image or a
// pool: one instance, started from scratch once, that every run reuses as
// the last one left it. Its bridge is the ABI's Host without tools (the
// program calls none).
type bareHost struct {
	e    *engine.Engine
	inst *engine.Instance
}

func newBareHost(ctx context.Context) (*bareHost, error) {
	e, err := engine.New(ctx, engine.Config{
		Wasm: guest.Wasm, StdlibZip: guest.StdlibZip,
		MemoryLimit: 256 << 20, MaxOutput: 1 << 20, MaxDescriptors: 64,
		Start:  engine.StartFresh,
		Bridge: abi.Host{}, // no tools: every import answers as a Host without them
	})
	if err != nil {
		return nil, err
	}
	inst, err := e.NewInstance(ctx)
	if err != nil {
		e.Close(ctx)
		return nil, err
	}
	h := &bareHost{e: e, inst: inst}
	// The first run installs the (empty) tool list and leaves the Guest as
	// a Runner's image holds it: the same modules imported, the early-read
	// pass run once, everything alive frozen.
	first, _ := json.Marshal(map[string]any{"source": bareWarmSource, "inputs": map[string]any{}, "tools": []any{},
		"early_reads": false, "result_limit": 1 << 20})
	out, err := inst.Execute(inst.Begin(ctx, nil), first, 1<<20)
	inst.End()
	if err == nil && string(out) != `{"value":null}` {
		err = fmt.Errorf("warm-up answered %s", out)
	}
	if err != nil {
		h.close(ctx)
		return nil, err
	}
	return h, nil
}

// bareWarmSource does what the Runner's warm-up does before its image is
// taken, less what a program without tools or files does not touch.
const bareWarmSource = `import json, re, math, datetime, collections, itertools, functools, ast
import asyncio, concurrent.futures.thread
asyncio.run(asyncio.sleep(0))
import plm
plm.warm()
import gc
gc.collect()
gc.freeze()
`

func (h *bareHost) run(ctx context.Context) error {
	defer h.inst.End()
	out, err := h.inst.Execute(h.inst.Begin(ctx, nil), emptyRequest, 1<<20)
	if err == nil && string(out) != `{"value":null}` {
		err = fmt.Errorf("bare host answered %s", out)
	}
	return err
}

func (h *bareHost) close(ctx context.Context) {
	h.inst.Close()
	h.e.Close(ctx)
}
