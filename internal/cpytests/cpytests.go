// Package cpytests runs modules of CPython 3.11.2's own regression tests (Lib/test of the
// source the Guest is built from) in the Guest and natively with /usr/bin/python3.11, and
// compares the outcomes test by test: Spine's measure of how much it is CPython
// (docs/fidelity.md; make cpython-tests).
//
// Both sides run the same driver (driver.py). In the Guest it is a Spine program run
// through the public API by a Runner whose standard library archive is the Guest's own
// plus the test package (mktestzip.py, which compiles it with guest/mkstdlib.py).
package cpytests

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/guest"
)

// Driver is the Python program that runs one test module on either side.
//
//go:embed driver.py
var Driver string

// mkTestZip is the script that writes the Guest's archive plus the test package.
//
//go:embed mktestzip.py
var mkTestZip string

// Python is the native interpreter compared with: the Guest's CPython version, 3.11.2.
const Python = "/usr/bin/python3.11"

// Modules is the list make cpython-tests runs: what programs reach for most, the
// batteries the Guest builds in, and asyncio's tests that need no network, subprocess
// or threads.
var Modules = []string{
	"test_json", "test_re", "test_datetime", "test_collections", "test_itertools",
	"test_functools", "test_math", "test_statistics", "test_decimal", "test_fractions",
	"test_string", "test_textwrap", "test_difflib", "test_csv", "test_enum",
	"test_dataclasses", "test_typing", "test_zlib", "test_gzip", "test_sqlite3",
	"test_zoneinfo", "test_bisect", "test_heapq", "test_operator", "test_copy",
	"test_pprint", "test_base64", "test_hashlib", "test_struct", "test_random",
	"test_unicodedata", "test_contextlib", "test_abc", "test_exceptions",
	"test_pickle", "test_traceback", "test_grammar", "test_scope", "test_generators",
	"test_dict", "test_list", "test_set", "test_unicode", "test_int", "test_float",
	"test_asyncio.test_futures", "test_asyncio.test_futures2", "test_asyncio.test_tasks",
	"test_asyncio.test_locks", "test_asyncio.test_queues", "test_asyncio.test_events",
	"test_asyncio.test_timeouts", "test_asyncio.test_waitfor", "test_asyncio.test_context",
	"test_asyncio.test_taskgroups", "test_asyncio.test_pep492", "test_asyncio.test_runners",
}

// Assume is what a module's run tells test.support is there (driver.py): CPython skips
// the whole test_asyncio package on WASI for want of sockets, but asyncio's event loop
// should work in the Guest without them, so its tests run and fail where it does not.
func Assume(module string) []string {
	if strings.HasPrefix(module, "test_asyncio.") {
		return []string{"has_socket_support"}
	}
	return []string{}
}

// Outcomes a test can have, as the driver names them.
const (
	Pass  = "pass"
	Fail  = "fail"
	Error = "error"
	Skip  = "skip"
	XFail = "xfail" // an expected failure (counted as passed)
	XPass = "xpass" // an unexpected success (counted as failed, as unittest does)
)

// Statuses of a module's run.
const (
	StatusOK            = "ok"
	StatusModuleMissing = "module missing" // a module it needs is not there (Detail names it)
	StatusImportError   = "import error"
	StatusCrashed       = "crashed"   // the run ended before the driver could report
	StatusTimedOut      = "timed out" // the run was stopped at its time limit
)

// Test is one test's outcome.
type Test struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"` // skip reason or the exception's last line
}

// UnmarshalJSON reads the driver's [id, outcome, detail] or Test's own form.
func (t *Test) UnmarshalJSON(b []byte) error {
	var triple []string
	if err := json.Unmarshal(b, &triple); err == nil {
		if len(triple) != 3 {
			return fmt.Errorf("a test is [id, outcome, detail], not %d strings", len(triple))
		}
		t.ID, t.Outcome, t.Detail = triple[0], triple[1], triple[2]
		return nil
	}
	type plain Test
	return json.Unmarshal(b, (*plain)(t))
}

// Report is one module's run on one side.
type Report struct {
	Module  string            `json:"module"`
	Status  string            `json:"status"`
	Detail  string            `json:"detail,omitempty"`
	Tests   []Test            `json:"tests"`
	Traces  map[string]string `json:"traces,omitempty"` // test id → traceback, failures only
	Seconds float64           `json:"seconds"`          // wall time of the whole run
}

// Counts are a report's figures as unittest counts them.
type Counts struct {
	Run     int `json:"run"`
	Passed  int `json:"passed"` // expected failures included
	Failed  int `json:"failed"` // unexpected successes included
	Errors  int `json:"errors"`
	Skipped int `json:"skipped"`
}

// Counts counts r's tests.
func (r *Report) Counts() Counts {
	var c Counts
	for _, t := range r.Tests {
		c.Run++
		switch t.Outcome {
		case Pass, XFail:
			c.Passed++
		case Fail, XPass:
			c.Failed++
		case Error:
			c.Errors++
		case Skip:
			c.Skipped++
		}
	}
	return c
}

// decode reads a driver's report, checking what the rest of the package relies on.
func decode(data []byte) (*Report, error) {
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("the driver's report: %w", err)
	}
	switch r.Status {
	case StatusOK, StatusModuleMissing, StatusImportError, StatusCrashed:
	default:
		return nil, fmt.Errorf("the driver's report: unknown status %q", r.Status)
	}
	for _, t := range r.Tests {
		switch t.Outcome {
		case Pass, Fail, Error, Skip, XFail, XPass:
		default:
			return nil, fmt.Errorf("the driver's report: test %s has unknown outcome %q", t.ID, t.Outcome)
		}
	}
	return &r, nil
}

// GuestOptions are the Runner options a test module runs with: the Guest with the
// archive that holds the test package, its largest memory, and room for a big report.
func GuestOptions(stdlibZip []byte, timeout time.Duration) *spine.Options {
	return &spine.Options{
		Artifact:    &spine.Artifact{Wasm: guest.Wasm, StdlibZip: stdlibZip},
		MemoryLimit: 512 << 20,
		MaxResult:   32 << 20,
		MaxOutput:   1 << 20,
		Timeout:     timeout,
		PoolSize:    1,
	}
}

// RunGuest runs module (a name under the test package, e.g. "test_string") in a Guest
// of r, made with GuestOptions. Every failure is in the report's status.
func RunGuest(ctx context.Context, r *spine.Runner, module string, resources []string) *Report {
	start := time.Now()
	out, err := r.Run(ctx, spine.Request{
		Source:   Driver,
		Filename: "cpytests_driver.py",
		Inputs: map[string]any{"module": "test." + module, "resources": nonNil(resources),
			"assume": Assume(module)},
	})
	var rep *Report
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		rep = &Report{Status: StatusTimedOut, Detail: "stopped at the time limit"}
	case err != nil:
		detail := err.Error()
		var pe *spine.PythonError
		if errors.As(err, &pe) {
			detail += "\n" + pe.Traceback
		}
		if out != nil && out.Stderr != "" {
			detail += "\nstderr: " + tail(out.Stderr, 2000)
		}
		rep = &Report{Status: StatusCrashed, Detail: detail}
	default:
		rep, err = decode(out.Value)
		if err != nil {
			rep = &Report{Status: StatusCrashed, Detail: err.Error()}
		}
	}
	rep.Module, rep.Seconds = module, time.Since(start).Seconds()
	return rep
}

// RunNative runs module natively with python, the test package taken from the folder
// lib (which holds it as lib/test), in a fresh working folder under work, with no
// environment but PATH.
func RunNative(ctx context.Context, python, lib, work, module string, resources []string, timeout time.Duration) *Report {
	start := time.Now()
	rep := runNative(ctx, python, lib, work, module, resources, timeout)
	rep.Module, rep.Seconds = module, time.Since(start).Seconds()
	return rep
}

func runNative(ctx context.Context, python, lib, work, module string, resources []string, timeout time.Duration) *Report {
	dir, err := os.MkdirTemp(work, "native-")
	if err != nil {
		return &Report{Status: StatusCrashed, Detail: err.Error()}
	}
	defer os.RemoveAll(dir)
	driver := filepath.Join(dir, "cpytests_driver.py")
	if err := os.WriteFile(driver, []byte(Driver), 0o644); err != nil {
		return &Report{Status: StatusCrashed, Detail: err.Error()}
	}
	cwd := filepath.Join(dir, "cwd")
	if err := os.Mkdir(cwd, 0o755); err != nil {
		return &Report{Status: StatusCrashed, Detail: err.Error()}
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	report := filepath.Join(dir, "report.json")
	cmd := exec.CommandContext(ctx, python, "-I", "-B", "-X", "utf8", driver,
		lib, "test."+module, strings.Join(resources, ","), strings.Join(Assume(module), ","), report)
	cmd.Dir = cwd
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	cmd.WaitDelay = 10 * time.Second
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return &Report{Status: StatusTimedOut, Detail: "stopped at the time limit"}
	}
	data, err := os.ReadFile(report)
	if err != nil {
		return &Report{Status: StatusCrashed, Detail: fmt.Sprintf("%v (%v)\n%s", runErr, err, tail(stderr.String(), 2000))}
	}
	rep, err := decode(data)
	if err != nil {
		return &Report{Status: StatusCrashed, Detail: err.Error()}
	}
	return rep
}

// BuildZip writes to out the Guest's standard library archive (guestDir/artifact/
// python311.zip) plus the test package of lib (CPython's Lib folder), by running
// mktestzip.py with python; only, when not empty, limits the test modules taken.
func BuildZip(ctx context.Context, python, guestDir, lib, out string, only []string) error {
	script := out + ".mktestzip.py"
	if err := os.WriteFile(script, []byte(mkTestZip), 0o644); err != nil {
		return err
	}
	defer os.Remove(script)
	args := []string{"-I", "-B", script, "--guest", guestDir, "--lib", lib, "--out", out}
	for _, m := range only {
		args = append(args, "--only", m)
	}
	cmd := exec.CommandContext(ctx, python, args...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mktestzip: %v\n%s", err, msg)
	}
	return nil
}

// CheckPython reports why python cannot be the native side, or nil.
func CheckPython(python string) error {
	v, err := exec.Command(python, "-c", "import sys; print(sys.version.split()[0])").Output()
	if err != nil {
		return fmt.Errorf("%s: %v", python, err)
	}
	if got := strings.TrimSpace(string(v)); got != "3.11.2" {
		return fmt.Errorf("%s is CPython %s, not the Guest's 3.11.2", python, got)
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
