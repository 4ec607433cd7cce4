package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// module writes a module of one package with the test file src into a new
// folder and makes it the working directory.
func module(t *testing.T, src string) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":    "module example.com/m\n\ngo 1.24\n",
		"m.go":      "package m\n",
		"m_test.go": src,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	t.Setenv("GOFLAGS", "")
	t.Setenv("GOTOOLCHAIN", "local")
}

// goTest runs testprogress over a real go test of the module.
func goTest(t *testing.T) (code int, out, stderr string) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	var o, e bytes.Buffer
	code = run([]string{goBin, "test", "-json", "-count=1", "./..."}, &o, &e)
	return code, o.String(), e.String()
}

func TestFailuresShown(t *testing.T) {
	module(t, `package m

import "testing"

func TestPass(t *testing.T) { t.Log("quiet when it passes") }

func TestFail(t *testing.T) { t.Error("the reason it failed") }

func TestSub(t *testing.T) {
	t.Run("fine", func(t *testing.T) {})
	t.Run("broken", func(t *testing.T) { t.Fatal("the subtest's reason") })
}
`)
	code, out, _ := goTest(t)
	if code != 1 {
		t.Errorf("exit code %d, want go test's 1", code)
	}
	for _, want := range []string{
		"FAIL example.com/m TestFail", "the reason it failed",
		"FAIL example.com/m TestSub", "the subtest's reason", "--- FAIL: TestSub/broken",
		"FAIL\texample.com/m\t", // go test's closing line
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the progress does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "quiet when it passes") || strings.Contains(out, "TestPass") {
		t.Errorf("a quick test that passed has a line:\n%s", out)
	}
	_, tail, _ := strings.Cut(out, "failed:\n")
	if want := "    example.com/m TestFail\n    example.com/m TestSub\n    example.com/m\n"; tail != want {
		t.Errorf("the closing summary is %q, want %q:\n%s", tail, want, out)
	}
}

func TestPassing(t *testing.T) {
	module(t, "package m\n\nimport \"testing\"\n\nfunc TestPass(t *testing.T) {}\n")
	code, out, _ := goTest(t)
	if code != 0 {
		t.Errorf("exit code %d, want 0:\n%s", code, out)
	}
	if !strings.Contains(out, "ok  \texample.com/m\t") {
		t.Errorf("no closing ok line:\n%s", out)
	}
	if strings.Contains(out, "failed:") {
		t.Errorf("a summary of failures when nothing failed:\n%s", out)
	}
}

func TestBuildFailure(t *testing.T) {
	module(t, "package m\n\nimport \"testing\"\n\nfunc TestPass(t *testing.T) { undefinedName() }\n")
	code, out, stderr := goTest(t)
	if code == 0 {
		t.Errorf("exit code 0 for a package that does not build:\n%s", out)
	}
	if !strings.Contains(out+stderr, "undefinedName") {
		t.Errorf("the build error is not shown:\n%s\n%s", out, stderr)
	}
}

func TestNotJSON(t *testing.T) {
	var o bytes.Buffer
	p := newProgress(&o)
	p.read(strings.NewReader("plain line\n{\"Action\":\"output\",\"Package\":\"p\",\"Output\":\"ok  \\tp\\t0.1s\\n\"}\n"))
	if got := o.String(); !strings.Contains(got, "plain line\n") || !strings.Contains(got, "ok  \tp\t0.1s\n") {
		t.Errorf("got %q", got)
	}
}
