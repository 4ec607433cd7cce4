package cpytests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spine-run/spine"
)

// safety is only a net for a run that never ends; no test here measures time.
const safety = 10 * time.Minute

// A test package of our own: one test of every outcome, a data file read from beside
// the module (through the driver's archive reader in the Guest), a test only the Guest
// passes, and a module that needs a module nobody has.
var ownPackage = map[string]string{
	"test/__init__.py": "",
	"test/data.txt":    "beside the tests\n",
	"test/test_spinecheck.py": `import os
import sys
import unittest

HERE = os.path.dirname(__file__)


class Outcomes(unittest.TestCase):
    def test_pass(self):
        self.assertEqual(sum(range(10)), 45)

    def test_fail(self):
        self.assertEqual(1, 2, "one is not two")

    def test_error(self):
        raise KeyError("no such key")

    @unittest.skip("a reason of its own")
    def test_skip(self):
        pass

    @unittest.expectedFailure
    def test_xfail(self):
        self.assertTrue(False)

    @unittest.expectedFailure
    def test_xpass(self):
        pass

    def test_subtests(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 2)

    def test_data_file(self):
        with open(os.path.join(HERE, "data.txt"), encoding="utf-8") as f:
            self.assertEqual(f.read(), "beside the tests\n")
        self.assertIn("data.txt", os.listdir(HERE))
        self.assertTrue(os.path.isfile(os.path.join(HERE, "data.txt")))

    @unittest.skipUnless(sys.platform == "wasi", "not WASI")
    def test_wasi_only(self):
        pass
`,
	"test/test_spinemissing.py": "import spine_no_such_module\n",
}

func needPython(t *testing.T) {
	t.Helper()
	if err := CheckPython(Python); err != nil {
		t.Skip(err)
	}
}

// buildZip writes the Guest's archive plus the test package of lib, limited to only.
func buildZip(t *testing.T, lib string, only ...string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "tests.zip")
	if err := BuildZip(context.Background(), Python, filepath.Join("..", "..", "guest"), lib, out, only); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func newRunner(t *testing.T, zip []byte) *spine.Runner {
	t.Helper()
	r, err := spine.New(context.Background(), nil, GuestOptions(zip, safety))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// TestOwnPackage runs a test package of our own through the same driver in the Guest
// and natively, and checks every outcome, the counts and the one difference.
func TestOwnPackage(t *testing.T) {
	needPython(t)
	lib := t.TempDir()
	for name, text := range ownPackage {
		path := filepath.Join(lib, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := newRunner(t, buildZip(t, lib))
	ctx := context.Background()

	g := RunGuest(ctx, r, "test_spinecheck", nil)
	n := RunNative(ctx, Python, lib, t.TempDir(), "test_spinecheck", nil, safety)
	want := map[string]string{
		"test_pass": Pass, "test_fail": Fail, "test_error": Error, "test_skip": Skip,
		"test_xfail": XFail, "test_xpass": XPass, "test_subtests": Fail, "test_data_file": Pass,
	}
	for side, rep := range map[string]*Report{"Guest": g, "native": n} {
		if rep.Status != StatusOK {
			t.Fatalf("%s: status %s: %s", side, rep.Status, rep.Detail)
		}
		got := map[string]Test{}
		for _, test := range rep.Tests {
			got[strings.TrimPrefix(test.ID, "test.test_spinecheck.Outcomes.")] = test
		}
		for name, outcome := range want {
			if got[name].Outcome != outcome {
				t.Errorf("%s: %s is %q (%s), want %q\n%s", side, name, got[name].Outcome, got[name].Detail, outcome, rep.Traces[got[name].ID])
			}
		}
		if d := got["test_skip"].Detail; d != "a reason of its own" {
			t.Errorf("%s: skip reason %q", side, d)
		}
		if d := got["test_subtests"].Detail; !strings.Contains(d, "(i=2)") || !strings.Contains(d, "AssertionError") {
			t.Errorf("%s: the subtest's failure is %q", side, d)
		}
		if d := got["test_error"].Detail; d != "KeyError: 'no such key'" {
			t.Errorf("%s: the error is %q", side, d)
		}
	}
	// Counts: 9 tests; pass + xfail + data file (+ the WASI test in the Guest) passed.
	if c, want := g.Counts(), (Counts{Run: 9, Passed: 4, Failed: 3, Errors: 1, Skipped: 1}); c != want {
		t.Errorf("Guest counts %+v, want %+v", c, want)
	}
	if c, want := n.Counts(), (Counts{Run: 9, Passed: 3, Failed: 3, Errors: 1, Skipped: 2}); c != want {
		t.Errorf("native counts %+v, want %+v", c, want)
	}
	m := Compare(g, n)
	if len(m.Differences) != 1 || m.Differences[0].ID != "test.test_spinecheck.Outcomes.test_wasi_only" ||
		m.Differences[0].Kind != "skipped natively only" {
		t.Errorf("differences: %+v", m.Differences)
	}

	for side, rep := range map[string]*Report{
		"Guest":  RunGuest(ctx, r, "test_spinemissing", nil),
		"native": RunNative(ctx, Python, lib, t.TempDir(), "test_spinemissing", nil, safety),
	} {
		if rep.Status != StatusModuleMissing || rep.Detail != "spine_no_such_module" {
			t.Errorf("%s: a module that needs a missing module: %s %q", side, rep.Status, rep.Detail)
		}
	}
	if rep := RunGuest(ctx, r, "test_nothing_by_this_name", nil); rep.Status != StatusImportError {
		t.Errorf("a test module that is not there: %s %q", rep.Status, rep.Detail)
	}
}

// TestCPythonTestString runs CPython's own test_string in the Guest and natively, when
// the source is there (guest/build.sh --source-only fetches it), and expects the same
// outcome for every test.
func TestCPythonTestString(t *testing.T) {
	needPython(t)
	lib := filepath.Join("..", "..", "build", "guest", "Python-3.11.2", "Lib")
	if _, err := os.Stat(filepath.Join(lib, "test", "test_string.py")); err != nil {
		t.Skipf("no CPython source (guest/build.sh --source-only fetches it): %v", err)
	}
	r := newRunner(t, buildZip(t, lib, "test_string"))
	native := t.TempDir()
	abs, err := filepath.Abs(filepath.Join(lib, "test"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(native, "test")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := Compare(RunGuest(ctx, r, "test_string", nil), RunNative(ctx, Python, native, t.TempDir(), "test_string", nil, safety))
	if m.Guest.Status != StatusOK || m.Native.Status != StatusOK {
		t.Fatalf("Guest %s %s; native %s %s", m.Guest.Status, m.Guest.Detail, m.Native.Status, m.Native.Detail)
	}
	if m.GuestCounts.Run < 30 || m.GuestCounts != m.NativeCounts {
		t.Errorf("Guest %+v, native %+v", m.GuestCounts, m.NativeCounts)
	}
	for _, d := range m.Differences {
		t.Errorf("%s: %s\n  Guest:  %s\n  native: %s\n%s", d.Kind, d.ID, d.Guest, d.Native, d.Trace)
	}
}

func TestDecode(t *testing.T) {
	for _, bad := range []string{
		`not json`,
		`{"status": "fine", "tests": []}`,
		`{"status": "ok", "tests": [["a", "pass"]]}`,
		`{"status": "ok", "tests": [["a", "won", ""]]}`,
	} {
		if _, err := decode([]byte(bad)); err == nil {
			t.Errorf("decode(%s) did not fail", bad)
		}
	}
	r, err := decode([]byte(`{"module": "m", "status": "ok", "tests": [["a", "pass", ""], ["b", "skip", "why"]]}`))
	if err != nil || r.Counts() != (Counts{Run: 2, Passed: 1, Skipped: 1}) || r.Tests[1].Detail != "why" {
		t.Errorf("decode: %+v, %v", r, err)
	}
}
