package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunPackagesAndPreload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Guest in a subprocess")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "shapes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shapes", "__init__.py"), []byte("def area(w, h):\n    return w * h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := writeFile(t, "prog.py", "import sys\nprint('shapes' in sys.modules)\nimport shapes\nresult = shapes.area(6, 7)\n")
	spineCLI(t, "", "run", "--packages", dir, "--preload", "shapes", prog).check(t, 0, "True\n42\n")
	spineCLI(t, "", "run", "--packages", dir, prog).check(t, 0, "False\n42\n")

	if err := os.WriteFile(filepath.Join(dir, "shapes", "_fast.cpython-311-x86_64-linux-gnu.so"), []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	spineCLI(t, "", "run", "--packages", dir, prog).check(t, 2, "", "shapes/_fast.cpython-311-x86_64-linux-gnu.so")
}

// TestRunBadPreload: a module to preload that is not there is a usage error
// that names it, not the Guest's response.
func TestRunBadPreload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Guest in a subprocess")
	}
	prog := writeFile(t, "prog.py", "result = 1\n")
	r := spineCLI(t, "", "run", "--preload", "json,no_such_module_here", prog)
	r.check(t, 2, "", "preload no_such_module_here: ModuleNotFoundError: No module named 'no_such_module_here'")
	if strings.Contains(r.stderr, `"traceback"`) || strings.Contains(r.stderr, "guest failed") {
		t.Fatalf("stderr shows the Guest's response:\n%s", r.stderr)
	}
}

func TestRunGuestFlagRefusals(t *testing.T) {
	prog := writeFile(t, "prog.py", "result = 1\n")
	spineCLI(t, "", "run", "--guest", filepath.Join(t.TempDir(), "missing"), prog).check(t, 2, "", "--guest")
	spineCLI(t, "", "run", "--packages", filepath.Join(t.TempDir(), "missing"), prog).check(t, 2, "", "--packages")
	spineCLI(t, "", "run", "--preload", "os;import subprocess", prog).check(t, 2, "", "not a module name")
	// A package folder with a link out of it (to the Host's environment).
	dir := t.TempDir()
	if err := os.Symlink("/proc/self/environ", filepath.Join(dir, "env.py")); err != nil {
		t.Fatal(err)
	}
	spineCLI(t, "", "run", "--packages", dir, prog).check(t, 2, "", "env.py: a symbolic link to /proc/self/environ, outside the package folder")
}

// TestRunDataGuestLikeNative runs the data Guest's numpy-and-sympy program
// through spine run --guest data: it prints what native numpy 1.24.2 and
// SymPy 1.11.1 print, byte for byte (guest/data/testdata).
func TestRunDataGuestLikeNative(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the data Guest in a subprocess")
	}
	want, err := os.ReadFile("../../guest/data/testdata/numpy_sympy.txt")
	if err != nil {
		t.Fatal(err)
	}
	spineCLI(t, "", "run", "--guest", "data", "../../guest/data/testdata/numpy_sympy.py").check(t, 0, string(want))
}
