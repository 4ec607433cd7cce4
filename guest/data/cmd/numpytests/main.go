// Command numpytests runs numpy 1.24.2's own tests, or with -suite pandas pandas
// 1.5.3's (a list of their test files), under pytest in the data Guest and natively,
// and prints a table of what ran, what passed and every difference by reason (make
// numpy-tests, make pandas-tests; docs/packages.md).
//
// Both sides run the test files Debian's python3-numpy 1.24.2 or python3-pandas 1.5.3
// installs (the same files as the sources at v1.24.2 and v1.5.3), with pytest 7.2.1,
// hypothesis and their pure-Python dependencies from Debian's packages: natively with
// /usr/bin/python3, in the Guest as Options.Packages, one run per test file.
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/guest/data"
)

// numpyFiles are numpy's test files run, relative to site-packages.
var numpyFiles = []string{
	"numpy/core/tests/test_numeric.py",
	"numpy/core/tests/test_umath.py",
	"numpy/core/tests/test_datetime.py",
	"numpy/core/tests/test_indexing.py",
	"numpy/core/tests/test_multiarray.py",
	"numpy/lib/tests/test_shape_base.py",
	"numpy/lib/tests/test_arraysetops.py",
	"numpy/linalg/tests/test_linalg.py",
	"numpy/fft/tests/test_pocketfft.py",
	"numpy/fft/tests/test_helper.py",
	"numpy/random/tests/test_random.py",
	"numpy/random/tests/test_randomstate.py",
	"numpy/polynomial/tests/test_polynomial.py",
}

// pandasFiles are pandas' test files run, relative to site-packages: what the
// data Guest is for (CSV, groupby, merge, pivot, datetime indexes, describe).
var pandasFiles = []string{
	"pandas/tests/io/parser/test_read_fwf.py",
	"pandas/tests/io/parser/common/test_common_basic.py",
	"pandas/tests/io/parser/test_parse_dates.py",
	"pandas/tests/io/formats/test_to_csv.py",
	"pandas/tests/groupby/test_groupby.py",
	"pandas/tests/groupby/aggregate/test_aggregate.py",
	"pandas/tests/reshape/merge/test_merge.py",
	"pandas/tests/reshape/test_pivot.py",
	"pandas/tests/resample/test_datetime_index.py",
	"pandas/tests/indexes/datetimes/test_date_range.py",
	"pandas/tests/frame/methods/test_describe.py",
	"pandas/tests/tslibs/test_parsing.py",
	"pandas/tests/series/test_arithmetic.py",
}

// deps are the pure-Python packages pytest and numpy's conftest need, from
// Debian's packages (python3-pytest, -pluggy, -iniconfig, -packaging, -attr,
// -hypothesis, -sortedcontainers).
var deps = []string{"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "attr", "hypothesis", "sortedcontainers", "py.py"}

const sitePackages = "/usr/lib/python3/dist-packages"

// pytestArgs are the same on both sides: no cache, no fd-level capture (WASI
// has no dup), no logging plugin (it opens /dev/null), one line a failure.
var pytestArgs = []string{"-q", "-p", "no:cacheprovider", "-p", "no:faulthandler", "-p", "no:logging",
	"--capture=sys", "-rfE", "--tb=line", "-W", "ignore", "-o", "console_output_style=classic"}

// driver runs one test file in the Guest: it extracts the package's tests
// (inputs["pkg"]: numpy or pandas) from the packages archive into /tmp/t, makes
// its subpackages find their tests package there, and runs pytest on the file.
const driver = `import importlib, os, sys, zipfile
pkg = inputs["pkg"]
importlib.import_module(pkg)
root = "/tmp/t"
with zipfile.ZipFile("/usr/local/lib/site.zip") as z:
    names = [n for n in z.namelist() if n.startswith(pkg + "/")]
    z.extractall(root, names)
packages = []
for dirpath, dirnames, filenames in os.walk(root + "/" + pkg):
    if not os.path.exists(dirpath + "/__init__.py"):
        open(dirpath + "/__init__.py", "w").close()
    if "tests" in dirnames or "conftest.py" in filenames:
        packages.append((os.path.relpath(dirpath, root).replace("/", "."), dirpath))
# The real packages first (from data.zip; those the Guest leaves out, such as
# numpy.distutils, are skipped), then their tests found here first.
found = []
for dotted, dirpath in packages:
    try:
        found.append((importlib.import_module(dotted), dirpath))
    except ModuleNotFoundError:
        pass
for module, dirpath in found:
    module.__path__.insert(0, dirpath)
import pytest
result = int(pytest.main(inputs["args"] + ["--rootdir=" + root, root + "/" + inputs["file"]]))
`

type outcome struct {
	counts   map[string]int
	failures map[string]string // node id → message
	seconds  float64
	err      string
}

func main() {
	work := flag.String("work", "build/numpy-tests", "a scratch folder")
	suite := flag.String("suite", "numpy", "whose tests: numpy or pandas")
	only := flag.String("files", "", "comma-separated test files to run instead of the list")
	python := flag.String("python", "/usr/bin/python3", "the python3 with Debian's numpy 1.24.2 (and pandas 1.5.3)")
	flag.Parse()
	list := map[string][]string{"numpy": numpyFiles, "pandas": pandasFiles}[*suite]
	if list == nil {
		fmt.Fprintln(os.Stderr, "numpytests: -suite is numpy or pandas")
		os.Exit(2)
	}
	if *only != "" {
		list = strings.Split(*only, ",")
	}
	if err := run(*work, *python, *suite, list); err != nil {
		fmt.Fprintln(os.Stderr, "numpytests:", err)
		os.Exit(1)
	}
}

func run(work, python, pkg string, list []string) error {
	stage := filepath.Join(work, "site")
	if err := os.RemoveAll(stage); err != nil {
		return err
	}
	if err := stageTree(stage, pkg); err != nil {
		return err
	}
	ctx := context.Background()
	r, err := spine.New(ctx, nil, &spine.Options{Artifact: data.Artifact(), Packages: os.DirFS(stage),
		PoolSize: 1, MemoryLimit: 512 << 20, ScratchSize: 256 << 20, MaxScratchEntries: 20000, Timeout: 30 * time.Minute})
	if err != nil {
		return err
	}
	defer r.Close(ctx)
	fmt.Printf("| test file | native: passed / failed / skipped | Guest: passed / failed / skipped | differences (Guest only), by reason |\n|---|---|---|---|\n")
	var total [2]map[string]int
	total[0], total[1] = map[string]int{}, map[string]int{}
	reasons := map[string]int{}
	for _, file := range list {
		fmt.Fprintf(os.Stderr, "numpytests: %s\n", file)
		nat := runNative(ctx, python, work, pkg, file)
		g := runGuest(ctx, r, pkg, file)
		for k, v := range nat.counts {
			total[0][k] += v
		}
		for k, v := range g.counts {
			total[1][k] += v
		}
		diff := map[string]int{}
		for id, msg := range g.failures {
			if _, ok := nat.failures[id]; !ok {
				diff[reason(msg)]++
				reasons[reason(msg)]++
			}
		}
		if g.err != "" {
			diff[g.err]++
			reasons[g.err]++
		}
		fmt.Printf("| %s | %s | %s | %s |\n", strings.TrimPrefix(file, pkg+"/"), counts(nat), counts(g), byReason(diff))
	}
	fmt.Printf("| **total** | %s | %s | %s |\n", counts(outcome{counts: total[0]}), counts(outcome{counts: total[1]}), byReason(reasons))
	return nil
}

// stageTree copies pytest and its dependencies, and pkg's tests (with its
// conftest.py), into dir, for Options.Packages.
func stageTree(dir, pkg string) error {
	var roots []string
	for _, d := range deps {
		roots = append(roots, filepath.Join(sitePackages, d))
	}
	roots = append(roots, filepath.Join(sitePackages, pkg, "conftest.py"))
	err := filepath.WalkDir(filepath.Join(sitePackages, pkg), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "tests" {
			roots = append(roots, p)
			return fs.SkipDir
		}
		return err
	})
	if err != nil {
		return err
	}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "__pycache__" {
				return fs.SkipDir
			}
			if d.IsDir() || strings.HasSuffix(p, ".so") || strings.HasSuffix(p, ".pyc") {
				return nil
			}
			rel, _ := filepath.Rel(sitePackages, p)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			target := filepath.Join(dir, rel)
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			return os.WriteFile(target, b, 0o644)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func runNative(ctx context.Context, python, work, pkg, file string) outcome {
	args := append([]string{"-m", "pytest"}, pytestArgs...)
	args = append(args, "--rootdir="+sitePackages, filepath.Join(sitePackages, file))
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	start := time.Now()
	out, _ := cmd.CombinedOutput()
	o := parse(pkg, string(out))
	o.seconds = time.Since(start).Seconds()
	return o
}

func runGuest(ctx context.Context, r *spine.Runner, pkg, file string) outcome {
	start := time.Now()
	out, err := r.Run(ctx, spine.Request{Source: driver, Inputs: map[string]any{"pkg": pkg, "file": file, "args": pytestArgs}})
	var o outcome
	if out != nil {
		o = parse(pkg, out.Stdout)
	} else {
		o = parse(pkg, "")
	}
	if o.counts["errors"] > 0 && out != nil {
		fmt.Fprintf(os.Stderr, "numpytests: %s in the Guest: collection or fixture errors:\n%s\n", file, tail(out.Stdout))
	}
	if len(o.counts) == 0 {
		msg := "no pytest summary"
		if err != nil {
			msg = err.Error()
		}
		o.err = "the run failed: " + firstLine(msg)
		if out != nil {
			fmt.Fprintf(os.Stderr, "numpytests: %s in the Guest: %v\nstdout (end): %s\nstderr (end): %s\n", file, err, tail(out.Stdout), tail(out.Stderr))
		}
	}
	o.seconds = time.Since(start).Seconds()
	return o
}

var (
	countRe   = regexp.MustCompile(`(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected)`)
	failureRe = regexp.MustCompile(`(?m)^(FAILED|ERROR) (\S+)(?: - (.*))?$`)
	errLineRe = regexp.MustCompile(`(?m)^E   (.*)$`)
)

// parse reads pytest's -q output on pkg's tests: the summary's counts and the
// failures.
func parse(pkg, text string) outcome {
	o := outcome{counts: map[string]int{}, failures: map[string]string{}}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for i := len(lines) - 1; i >= 0 && i >= len(lines)-3; i-- {
		if m := countRe.FindAllStringSubmatch(lines[i], -1); len(m) > 0 {
			for _, x := range m {
				n, _ := strconv.Atoi(x[1])
				key := x[2]
				if key == "error" {
					key = "errors"
				}
				o.counts[key] += n
			}
			break
		}
	}
	for _, m := range failureRe.FindAllStringSubmatch(text, -1) {
		id := m[2]
		if i := strings.Index(id, pkg+"/"); i >= 0 {
			id = id[i:]
		}
		msg := m[3]
		if msg == "" && m[1] == "ERROR" {
			// A collection error: its reason is the first "E   " line of the report.
			if e := errLineRe.FindStringSubmatch(text); e != nil {
				msg = e[1]
			}
		}
		o.failures[id] = msg
	}
	return o
}

// reason names why a test failed in the Guest only, from its message.
func reason(msg string) string {
	switch {
	case strings.Contains(msg, "FloatingPointError") || strings.Contains(msg, "DID NOT RAISE") || strings.Contains(msg, "DID NOT WARN") || strings.Contains(msg, "RuntimeWarning"):
		return "no floating-point exception flags in wasm"
	case strings.Contains(msg, "MemoryError") || strings.Contains(msg, "Unable to allocate"):
		return "memory limit"
	case strings.Contains(msg, "ctypes"):
		return "no ctypes in the Guest"
	case strings.Contains(msg, "_umath_tests") || strings.Contains(msg, "_rational_tests") || strings.Contains(msg, "_struct_ufunc_tests") || strings.Contains(msg, "_operand_flag_tests"):
		return "numpy's test C modules are not linked"
	case strings.Contains(msg, "int32") || strings.Contains(msg, "int64") || strings.Contains(msg, "OverflowError"):
		return "32-bit default integer"
	case strings.Contains(msg, "Errno 58") || strings.Contains(msg, "Not supported"):
		return "WASI lacks the call (dup, ...)"
	}
	return "other: " + firstLine(msg)
}

func tail(s string) string {
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return s
}

func counts(o outcome) string {
	if len(o.counts) == 0 {
		return "—"
	}
	s := fmt.Sprintf("%d / %d / %d", o.counts["passed"], o.counts["failed"], o.counts["skipped"])
	if e := o.counts["errors"]; e > 0 {
		s += fmt.Sprintf(" (%d errors)", e)
	}
	// pandas marks tests that fail on 32-bit platforms xfail (not strict): the
	// Guest's pass as xpassed, or fail as xfailed, instead of passing.
	if x, xp := o.counts["xfailed"], o.counts["xpassed"]; x+xp > 0 {
		s += fmt.Sprintf(" (%d xfailed, %d xpassed)", x, xp)
	}
	return s
}

func byReason(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, "; ")
}
