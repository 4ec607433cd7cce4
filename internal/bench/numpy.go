package bench

import (
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
)

// numpyWorkloads are the numpy suite, in the compute suite's shape (setup,
// then work timed): each returns a few floats both sides must agree on to
// nine significant digits.
var numpyWorkloads = []workload{
	{"elementwise 1M", `import numpy as np
def setup():
    rng = np.random.default_rng(1)
    return rng.random(1_000_000), rng.random(1_000_000)
def work(d):
    x, y = d
    z = np.sqrt(x * y + 1.0) - np.exp(-x) * np.sin(y)
    return [float(z.sum()), float(z.max())]
`},
	{"matmul 300x300", `import numpy as np
def setup():
    rng = np.random.default_rng(2)
    return rng.random((300, 300)), rng.random((300, 300))
def work(d):
    a, b = d
    c = a @ b
    return [float(c.sum()), float(c[17, 42])]
`},
	{"solve 300x300", `import numpy as np
def setup():
    rng = np.random.default_rng(3)
    return rng.random((300, 300)) + 300 * np.eye(300), rng.random(300)
def work(d):
    a, b = d
    x = np.linalg.solve(a, b)
    return [float(x.sum()), float(x[7])]
`},
	{"sort 1M", `import numpy as np
def setup():
    return np.random.default_rng(4).random(1_000_000)
def work(x):
    s = np.sort(x)
    return [float(s[0]), float(s[500_000]), float(s[-1])]
`},
	{"pandas groupby 100k rows", `import numpy as np, pandas as pd
def setup():
    rng = np.random.default_rng(5)
    n = 100_000
    return pd.DataFrame({"key": rng.integers(0, 1000, n), "cat": rng.choice(["a", "b", "c", "d"], n),
                         "x": rng.random(n), "y": rng.normal(size=n)})
def work(df):
    g = df.groupby(["key", "cat"]).agg(x=("x", "sum"), y=("y", "mean"), n=("x", "size"))
    return [float(g["x"].sum()), float(g["y"].iloc[17]), float(len(g))]
`},
	{"pandas read_csv 10 MB", `import io, numpy as np, pandas as pd
def setup():
    rng = np.random.default_rng(6)
    n = 175_000
    df = pd.DataFrame({"id": np.arange(n, dtype=np.int64), "a": rng.random(n), "b": rng.normal(size=n),
                       "c": rng.choice(["red", "green", "blue"], n), "d": rng.integers(0, 10**6, n)})
    return df.to_csv(index=False).encode()
def work(text):
    df = pd.read_csv(io.BytesIO(text))
    return [float(len(text)), float(df["a"].sum()), float(df["d"].sum()), float(len(df))]
`},
}

// Numpy is the numpy suite: the numpy and pandas workloads on the data Guest
// against native numpy and pandas, and what the data Guest costs a pooled run and a warm instance.
type Numpy struct {
	Python    string            `json:"python"`
	Version   string            `json:"native_versions"` // native numpy's and pandas'
	Runs      int               `json:"runs"`
	Workloads []ComputeWorkload `json:"workloads"`
	GeoMean   float64           `json:"geomean_ratio"`
	// TinyDefault and TinyData are a tiny program's pooled runs on the
	// default Guest and on the data Guest; TinyNumpy a tiny numpy program's
	// on the data Guest (numpy preloaded: its import is a lookup).
	TinyDefault Stats `json:"tiny_default"`
	TinyData    Stats `json:"tiny_data"`
	TinyNumpy   Stats `json:"tiny_numpy"`
	// ImageDefaultMiB and ImageDataMiB are the top of the Guest's heap as
	// the image leaves it (the highest address of a live object, MiB).
	ImageDefaultMiB float64 `json:"image_default_mib"`
	ImageDataMiB    float64 `json:"image_data_mib"`
}

// numpyNativeScript is computeNativeScript, with numpy's and pandas' versions.
const numpyNativeScript = `import sys, json
g = {"__name__": "__main__"}
exec(compile(sys.stdin.read(), "<agent>", "exec"), g)
import numpy, pandas
print(json.dumps({"version": "numpy %s, pandas %s" % (numpy.__version__, pandas.__version__), "result": g["result"]}))
`

// tinyProgram and tinyNumpy are the pooled-run programs.
const (
	tinyProgram = "result = sum(range(10))"
	tinyNumpy   = "import numpy as np\nresult = int(np.arange(10).sum())"
	imageProbe  = "import sys\nresult = max(id(o) for o in __import__('gc').get_objects()) / 2**20"
)

func measureNumpy(ctx context.Context, cfg Config) (*Numpy, error) {
	data, err := spine.New(ctx, nil, &spine.Options{Artifact: cfg.Data, PoolSize: 1})
	if err != nil {
		return nil, err
	}
	defer closeRunner(ctx, data)
	def, err := spine.New(ctx, nil, &spine.Options{PoolSize: 1})
	if err != nil {
		return nil, err
	}
	defer closeRunner(ctx, def)
	n := &Numpy{Python: cfg.NumpyPython, Runs: cfg.ComputeRuns}
	guestTimes := make([][]time.Duration, len(numpyWorkloads))
	nativeTimes := make([][]time.Duration, len(numpyWorkloads))
	for run := 0; run < cfg.ComputeRuns; run++ {
		for i, w := range numpyWorkloads {
			g, n2, version, err := numpyOnce(ctx, data, cfg.NumpyPython, w)
			if err != nil {
				return nil, err
			}
			n.Version = version
			guestTimes[i] = append(guestTimes[i], g)
			nativeTimes[i] = append(nativeTimes[i], n2)
		}
	}
	logSum := 0.0
	for i, w := range numpyWorkloads {
		g, nat := ms(slices.Min(guestTimes[i])), ms(slices.Min(nativeTimes[i]))
		cw := ComputeWorkload{Name: w.name, GuestMs: g, NativeMs: nat}
		if g > 0 && nat > 0 {
			cw.Ratio = g / nat
			logSum += math.Log(cw.Ratio)
		}
		n.Workloads = append(n.Workloads, cw)
	}
	n.GeoMean = math.Exp(logSum / float64(len(numpyWorkloads)))

	// Pooled tiny runs, interleaved so the machine's load falls on both alike.
	var tDef, tData, tNumpy []time.Duration
	for i := 0; i < cfg.Runs; i++ {
		for _, p := range []struct {
			r    *spine.Runner
			src  string
			into *[]time.Duration
		}{{def, tinyProgram, &tDef}, {data, tinyProgram, &tData}, {data, tinyNumpy, &tNumpy}} {
			start := time.Now()
			if _, err := p.r.Run(ctx, spine.Request{Source: p.src}); err != nil {
				return nil, fmt.Errorf("tiny run: %w", err)
			}
			*p.into = append(*p.into, time.Since(start))
		}
	}
	n.TinyDefault, n.TinyData, n.TinyNumpy = summarize(tDef), summarize(tData), summarize(tNumpy)
	for _, p := range []struct {
		r    *spine.Runner
		into *float64
	}{{def, &n.ImageDefaultMiB}, {data, &n.ImageDataMiB}} {
		out, err := p.r.Run(ctx, spine.Request{Source: imageProbe})
		if err != nil {
			return nil, fmt.Errorf("image probe: %w", err)
		}
		if err := json.Unmarshal(out.Value, p.into); err != nil {
			return nil, fmt.Errorf("image probe: %s: %v", out.Value, err)
		}
	}
	return n, nil
}

// numpyOnce runs workload w once on the data Guest and once natively, and
// checks that both computed the same.
func numpyOnce(ctx context.Context, data *spine.Runner, python string, w workload) (guest, native time.Duration, version string, err error) {
	program := w.source + computeWrap
	out, err := data.Run(ctx, spine.Request{Source: program})
	if err != nil {
		return 0, 0, "", fmt.Errorf("%s on the data Guest: %w", w.name, err)
	}
	gns, gcheck, ok := timedCheck(out.Value)
	if !ok {
		return 0, 0, "", fmt.Errorf("%s on the data Guest: result %s", w.name, out.Value)
	}
	nns, ncheck, version, err := nativeNumpy(ctx, python, program)
	if err != nil {
		return 0, 0, "", fmt.Errorf("%s: %w", w.name, err)
	}
	if !sameFloats(gcheck, ncheck) {
		return 0, 0, "", fmt.Errorf("%s: the data Guest computed %v, %s computed %v", w.name, gcheck, python, ncheck)
	}
	return time.Duration(gns), time.Duration(nns), version, nil
}

// nativeNumpy runs a numpy program in python, a process, and reads its value.
func nativeNumpy(ctx context.Context, python, program string) (ns int64, check []float64, version string, err error) {
	cmd := exec.CommandContext(ctx, python, "-c", numpyNativeScript)
	cmd.Stdin = strings.NewReader(program)
	text, err := cmd.Output()
	if err != nil {
		return 0, nil, "", fmt.Errorf("in %s: %w", python, err)
	}
	var nat struct {
		Version string          `json:"version"`
		Result  json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(text, &nat); err != nil {
		return 0, nil, "", fmt.Errorf("in %s: printed %q", python, text)
	}
	ns, check, ok := timedCheck(nat.Result)
	if !ok {
		return 0, nil, "", fmt.Errorf("in %s: printed %q", python, text)
	}
	return ns, check, nat.Version, nil
}

// sameFloats reports whether a and b agree to nine significant digits.
func sameFloats(a, b []float64) bool {
	same := len(a) == len(b)
	for i := 0; same && i < len(a); i++ {
		same = math.Abs(a[i]-b[i]) <= 1e-9*math.Max(math.Abs(a[i]), math.Abs(b[i]))
	}
	return same
}

// timedCheck reads computeWrap's result: [ns, [floats]].
func timedCheck(v json.RawMessage) (ns int64, check []float64, ok bool) {
	var pair [2]json.RawMessage
	ok = json.Unmarshal(v, &pair) == nil && json.Unmarshal(pair[0], &ns) == nil && json.Unmarshal(pair[1], &check) == nil
	return ns, check, ok
}

func (n *Numpy) print(w io.Writer) {
	fmt.Fprintf(w, "\nnumpy and pandas (work(setup()) timed inside Python; the data Guest a pooled run each, %s with %s a process each, alternating; the best of %d):\n",
		n.Python, n.Version, n.Runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  workload\tdata Guest ms\tnative ms\tGuest / native\t\n")
	for _, x := range n.Workloads {
		fmt.Fprintf(tw, "  %s\t%.2f\t%.2f\t%.2f×\t\n", x.Name, x.GuestMs, x.NativeMs, x.Ratio)
	}
	fmt.Fprintf(tw, "  geometric mean\t\t\t%.2f×\t\n", n.GeoMean)
	tw.Flush()
	fmt.Fprintf(w, "  pooled run p50 (p95), %d each, interleaved: %q default %.3f (%.3f) ms, data %.3f (%.3f) ms; %q on data %.3f (%.3f) ms\n",
		n.TinyDefault.N, tinyProgram, n.TinyDefault.P50, n.TinyDefault.P95, n.TinyData.P50, n.TinyData.P95,
		strings.ReplaceAll(tinyNumpy, "\n", "; "), n.TinyNumpy.P50, n.TinyNumpy.P95)
	fmt.Fprintf(w, "  Guest heap top after the image (max id() of a live object): default %.1f MiB, data %.1f MiB\n",
		n.ImageDefaultMiB, n.ImageDataMiB)
}
