package data

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spine-run/spine"
)

// TestPandasLikeNative runs the pandas programs of testdata in the data Guest on
// the CSV files they are given (Request.Files) and compares what they print with
// what native pandas 1.5.3 printed (the .txt beside each, made by /usr/bin/python3
// with Debian's python3-pandas, python3-numpy and python3-sympy in a folder holding
// the same files); when that Python is here with those versions, with a run of it
// too. make data-test installs them.
func TestPandasLikeNative(t *testing.T) {
	files := []string{"sales.csv", "stores.csv"}
	for _, name := range []string{"pandas_sales", "numpy_pandas_sympy"} {
		t.Run(name, func(t *testing.T) {
			program, err := os.ReadFile(filepath.Join("testdata", name+".py"))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata", name+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			req := spine.Request{Source: string(program)}
			for _, f := range files {
				data, err := os.ReadFile(filepath.Join("testdata", f))
				if err != nil {
					t.Fatal(err)
				}
				req.Files = append(req.Files, spine.File{Name: f, Data: data})
			}
			out, err := dataRunner(t).Run(context.Background(), req)
			if err != nil {
				var pe *spine.PythonError
				if errors.As(err, &pe) {
					t.Fatalf("%v\n%s\nstderr: %s", err, pe.Traceback, out.Stderr)
				}
				t.Fatal(err)
			}
			if out.Stdout != string(want) {
				t.Fatalf("the data Guest printed\n%s\nnative printed\n%s", out.Stdout, want)
			}
			native := nativePandas(t)
			if native == "" {
				return
			}
			dir := t.TempDir()
			for _, f := range req.Files {
				if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(native, filepath.Join(mustAbs(t, "testdata"), name+".py"))
			cmd.Dir = dir
			text, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(text, want) {
				t.Fatalf("native now prints\n%s\nnot the recorded\n%s", text, want)
			}
		})
	}
}

// nativePandas is /usr/bin/python3 when it has numpy 1.24.2, pandas 1.5.3 and
// sympy 1.11.1, else "".
func nativePandas(t *testing.T) string {
	const py = "/usr/bin/python3"
	v, err := exec.Command(py, "-c", "import numpy, pandas, sympy; print(numpy.__version__, pandas.__version__, sympy.__version__)").Output()
	if err != nil || strings.TrimSpace(string(v)) != "1.24.2 1.5.3 1.11.1" {
		t.Logf("no native numpy 1.24.2, pandas 1.5.3 and sympy 1.11.1 at %s: compared with the recorded output only", py)
		return ""
	}
	return py
}
