package data

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine"
)

var (
	runnerOnce sync.Once
	runner     *spine.Runner
	runnerErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if runner != nil {
		runner.Close(context.Background())
	}
	os.Exit(code)
}

// dataRunner is one Runner on the data Guest, shared by the tests.
func dataRunner(t *testing.T) *spine.Runner {
	t.Helper()
	runnerOnce.Do(func() {
		runner, runnerErr = spine.New(context.Background(), nil, &spine.Options{Artifact: Artifact(), PoolSize: 1})
	})
	if runnerErr != nil {
		t.Fatal(runnerErr)
	}
	return runner
}

func run(t *testing.T, src string) *spine.Output {
	t.Helper()
	out, err := dataRunner(t).Run(context.Background(), spine.Request{Source: src})
	if err != nil {
		var pe *spine.PythonError
		if errors.As(err, &pe) {
			t.Fatalf("%v\n%s\nstderr: %s", err, pe.Traceback, out.Stderr)
		}
		t.Fatal(err)
	}
	return out
}

// TestNumpySympyLikeNative runs testdata/numpy_sympy.py in the data Guest and
// compares what it prints with what native numpy 1.24.2 and sympy 1.11.1
// printed (testdata/numpy_sympy.txt, made by /usr/bin/python3 with Debian's
// python3-numpy and python3-sympy); when that Python is here with those
// versions, with a run of it too.
func TestNumpySympyLikeNative(t *testing.T) {
	program, err := os.ReadFile("testdata/numpy_sympy.py")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/numpy_sympy.txt")
	if err != nil {
		t.Fatal(err)
	}
	out := run(t, string(program))
	if got := out.Stdout; got != string(want) {
		t.Fatalf("the data Guest printed\n%s\nnative printed\n%s", got, want)
	}
	checkNative(t, "numpy_sympy", t.TempDir(), want, "numpy 1.24.2", "sympy 1.11.1")
}

// checkNative runs testdata/name.py with /usr/bin/python3 in dir and fails t
// unless it prints want, when that Python has each of packages at its version
// ("numpy 1.24.2"); without them, it logs that it did not.
func checkNative(t *testing.T, name, dir string, want []byte, packages ...string) {
	t.Helper()
	const py = "/usr/bin/python3"
	var modules, versions, asked []string
	for _, p := range packages {
		module, version, _ := strings.Cut(p, " ")
		modules = append(modules, module)
		versions = append(versions, version)
		asked = append(asked, module+".__version__")
	}
	v, err := exec.Command(py, "-c", "import "+strings.Join(modules, ", ")+"; print("+strings.Join(asked, ", ")+")").Output()
	if err != nil || strings.TrimSpace(string(v)) != strings.Join(versions, " ") {
		t.Logf("no native %s at %s: compared with the recorded output only", strings.Join(packages, ", "), py)
		return
	}
	cmd := exec.Command(py, filepath.Join(mustAbs(t, "testdata"), name+".py"))
	cmd.Dir = dir
	text, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(text, want) {
		t.Fatalf("native now prints\n%s\nnot the recorded\n%s", text, want)
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestPlatformDifferences pins what the data Guest does where wasm32 differs
// from a 64-bit native numpy (docs/packages.md).
func TestPlatformDifferences(t *testing.T) {
	out := run(t, `import numpy as np, sys
a = np.arange(100_000)
with np.errstate(all="raise"):
    try:
        np.array([1.0]) / 0
        raised = False
    except FloatingPointError:
        raised = True
result = {"int": str(np.dtype(int)), "intp": str(np.dtype(np.intp)), "arange": str(a.dtype),
          "square_sum_wraps": int((a ** 2).sum()), "int64_sum": int((a.astype(np.int64) ** 2).sum()),
          "raised": raised, "preloaded": "numpy.linalg" in sys.modules and "sympy" in sys.modules}`)
	var got map[string]any
	if err := json.Unmarshal(out.Value, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"int": "int32", "intp": "int32", "arange": "int32",
		"square_sum_wraps": float64(int32Wrap(sumSquares(100_000))), "int64_sum": float64(sumSquares(100_000)),
		"raised": false, "preloaded": true}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func sumSquares(n int64) int64 { return (n - 1) * n * (2*n - 1) / 6 }

// int32Wrap is the sum numpy computes in int32 for a sum of int32 squares
// that each fit: the running sum wraps at 2**32.
func int32Wrap(v int64) int64 { return int64(int32(uint32(v))) }

// TestSourcesMatchManifest fails when a source of the data Guest changed
// without a rebuild (guest/data/build.sh).
func TestSourcesMatchManifest(t *testing.T) {
	var m struct {
		Sources  map[string]string `json:"sources"`
		Artifact map[string]string `json:"artifact"`
	}
	if err := json.Unmarshal(Manifest, &m); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"guest/c/spine.c", "guest/data/build.sh", "guest/data/c/cxa_abort.c", "guest/data/numpy.patch",
		"guest/data/pandas.patch", "guest/data/pytz.patch", "guest/data/python/_spine_builtins.py",
		"guest/data/tools/collect.py", "guest/data/tools/fakeld.py", "guest/data/tools/mkmanifest.py",
		"guest/data/tools/mkpackages.py", "guest/data/tools/pdbuild.py"} {
		data, err := os.ReadFile(filepath.Join("..", "..", rel))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if m.Sources[rel] != hex.EncodeToString(sum[:]) {
			t.Errorf("%s changed since the data Guest was built: run make data-guest", rel)
		}
	}
	for name, data := range map[string][]byte{"spine.wasm": Wasm, "packages.zip": PackagesZip} {
		sum := sha256.Sum256(data)
		if m.Artifact[name] != hex.EncodeToString(sum[:]) {
			t.Errorf("artifact/%s does not match the manifest", name)
		}
	}
}

// TestYAMLLikeNative runs testdata/yaml_config.py, PyYAML's loader and
// dumper, and compares what it prints with what Debian's python3-yaml 6.0
// printed natively (testdata/yaml_config.txt), and with a run of it when that
// Python is here; the Guest's PyYAML is the pure-Python one.
func TestYAMLLikeNative(t *testing.T) {
	program, err := os.ReadFile("testdata/yaml_config.py")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/yaml_config.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, string(program)).Stdout; got != string(want) {
		t.Fatalf("the data Guest printed\n%s\nnative printed\n%s", got, want)
	}
	if got := run(t, "import yaml\nyaml.__with_libyaml__").Value; string(got) != "false" {
		t.Errorf("yaml.__with_libyaml__ is %s in the Guest", got)
	}
	checkNative(t, "yaml_config", t.TempDir(), want, "yaml 6.0")
}

// TestRandomFreshEveryRun: random's and numpy's global generators, and
// DataFrame.sample, which draws from numpy's, are in the image (seeded while
// it was made, with fixed randomness); every run and every new session
// reseeds them from its own entropy, and a session goes on with its own.
func TestRandomFreshEveryRun(t *testing.T) {
	const draw = `import random, numpy as np, pandas as pd
[random.random(), np.random.rand(), pd.DataFrame({"a": range(100)}).sample(5).a.tolist()]`
	a, b := run(t, draw), run(t, draw)
	var va, vb []any
	if err := json.Unmarshal(a.Value, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b.Value, &vb); err != nil {
		t.Fatal(err)
	}
	for i, what := range []string{"random.random()", "np.random.rand()", "DataFrame.sample"} {
		if fmt.Sprint(va[i]) == fmt.Sprint(vb[i]) {
			t.Errorf("two runs drew the same %s: %v", what, va[i])
		}
	}
	ctx := context.Background()
	s, err := dataRunner(t).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if _, err := s.Run(ctx, spine.Request{Source: "import numpy as np\nnp.random.seed(1)"}); err != nil {
		t.Fatal(err)
	}
	out, err := s.Run(ctx, spine.Request{Source: "np.random.rand()"})
	if err != nil || string(out.Value) != "0.417022004702574" { // np.random.seed(1); np.random.rand()
		t.Fatalf("the session's next run drew %s (%v), not its seeded sequence's first number", out.Value, err)
	}
}

// TestRandomSeededWhenReached: the image's generators are seeded when a run
// first reaches one (world.find_generators' traps), not as it starts: a run
// that draws nothing leaves them as the image has them; every way to a
// generator (a name imported from its module, sympy's own Random, numpy's
// RandomState) draws anew in every run; a seed the program sets comes after
// that reseed and holds; and the classes a program sees are the real ones.
func TestRandomSeededWhenReached(t *testing.T) {
	if got := run(t, "import world\nlen(world._armed) > 0 and len(world._lazy) == 6 and not world._eager").Value; string(got) != "true" {
		t.Errorf("a run that draws nothing woke the image's generators, or they are not all lazy: %s", got)
	}
	for _, draw := range []string{
		"from random import random as r\nr()",
		"from random import getrandbits\ngetrandbits(64)",
		"import sympy.core.random as sr\nsr.rng.random()",
		"import numpy.random.mtrand as m\nm._rand.random_sample()",
		"from numpy.random import randint\nint(randint(1 << 30))",
	} {
		if a, b := run(t, draw).Value, run(t, draw).Value; string(a) == string(b) {
			t.Errorf("%q drew %s in two runs", draw, a)
		}
	}
	for src, want := range map[string]string{
		"import random\nrandom.seed(42)\nrandom.random()":         "0.6394267984578837",
		"from random import seed, random\nseed(42)\nrandom()":     "0.6394267984578837",
		"import numpy as np\nnp.random.seed(1)\nnp.random.rand()": "0.417022004702574",
		// A bit generator's state set directly (world._seed_bits, for one seeded eagerly):
		// the same seed the same stream, another another, PCG's increment odd.
		"import world, numpy as np\nout = []\n" +
			"for kind in (np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937, np.random.Philox, np.random.SFC64):\n" +
			"    a, b, c = kind(0), kind(0), kind(0)\n" +
			"    one, two = int.from_bytes(bytes(range(32)), 'little'), int.from_bytes(bytes(range(100, 132)), 'little')\n" +
			"    for g, seed in ((a, one), (b, one), (c, two)): world._seed_bits(g, seed)\n" +
			"    x, y, z = (int(np.random.Generator(g).integers(1 << 62)) for g in (a, b, c))\n" +
			"    out.append(x == y != z and (not kind.__name__.startswith('PCG') or a.state['state']['inc'] % 2 == 1))\n" +
			"out": "[true,true,true,true,true]",
		"import random, types, numpy as np, sympy.core.random as sr\n" +
			"[type(random._inst) is random.Random, type(np.random) is types.ModuleType, type(sr.rng) is random.Random]": "[true,true,true]",
	} {
		if got := run(t, src).Value; string(got) != want {
			t.Errorf("%q gave %s, want %s", src, got, want)
		}
	}
}

// TestValuesAsNotebookShows: numpy's and sympy's numbers and numpy's arrays
// get the JSON a user expects; a DataFrame, a Series and what has no faithful
// JSON form have none, and every value has its display, as IPython shows it.
func TestValuesAsNotebookShows(t *testing.T) {
	const setup = "import numpy as np, pandas as pd, sympy\ndf = pd.DataFrame({'qty': [1, 2, 3], 'name': ['a', 'b', 'c']})\nx = sympy.Symbol('x')\n"
	for _, c := range []struct {
		src, value, plain string
		formats           []string // the other formats the display must have
	}{
		{"df.qty.sum()", "6", "6", nil},
		{"np.int64(2**40)", "1099511627776", "1099511627776", nil},
		{"np.float32(0.5)", "0.5", "0.5", nil},
		{"np.float64(0.1)", "0.1", "0.1", nil},
		{"np.bool_(True)", "true", "True", nil},
		{"np.arange(6).reshape(2, 3)", "[[0,1,2],[3,4,5]]", "array([[0, 1, 2],\n       [3, 4, 5]])", nil},
		{"np.array(['a', 'b'])", `["a","b"]`, "array(['a', 'b'], dtype='<U1')", nil},
		{"np.array([1+2j])", "null", "array([1.+2.j])", nil},
		{"np.float64('nan')", "null", "nan", nil},
		{"np.datetime64('2024-01-02')", "null", "numpy.datetime64('2024-01-02')", nil},
		{"df.head()", "null", "   qty name\n0    1    a\n1    2    b\n2    3    c", []string{"text/html"}},
		{"df.qty", "null", "0    1\n1    2\n2    3\nName: qty, dtype: int64", nil},
		{"df.shape", "[3,2]", "(3, 2)", nil},
		{"sympy.Integer(7) ** 30", "22539340290692258087863249", "22539340290692258087863249", []string{"text/latex"}},
		{"sympy.Rational(1, 3)", "null", "1/3", []string{"text/latex"}},
		{"sympy.Float(0.25)", "0.25", "0.250000000000000", []string{"text/latex"}},
		{"x**2 + 1", "null", "x**2 + 1", []string{"text/latex"}},
		{"sympy.solve(x**2 - 4, x)", "[-2,2]", "[-2, 2]", nil},
		{"{np.int64(1): 2}", "null", "{1: 2}", nil},
	} {
		out := run(t, setup+c.src)
		if string(out.Value) != c.value || out.Display.Text() != c.plain {
			t.Errorf("%s: value %s, text/plain %q; want %s, %q", c.src, out.Value, out.Display.Text(), c.value, c.plain)
		}
		for _, f := range c.formats {
			if out.Display[f] == "" {
				t.Errorf("%s: no %s in %q", c.src, f, out.Display)
			}
		}
	}
}
