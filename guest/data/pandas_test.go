package data

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
			dir := t.TempDir()
			for _, f := range req.Files {
				if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			checkNative(t, name, dir, want, "numpy 1.24.2", "pandas 1.5.3", "sympy 1.11.1")
		})
	}
}
