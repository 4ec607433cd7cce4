package main

import (
	"os"
	"testing"
)

// TestRunDataGuestPandasLikeNative runs the data Guest's numpy, pandas and
// sympy program through spine run --guest data on the CSV file given with
// --file: it prints what native numpy 1.24.2, pandas 1.5.3 and SymPy 1.11.1
// print, byte for byte (guest/data/testdata).
func TestRunDataGuestPandasLikeNative(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the data Guest in a subprocess")
	}
	const dir = "../../guest/data/testdata/"
	want, err := os.ReadFile(dir + "numpy_pandas_sympy.txt")
	if err != nil {
		t.Fatal(err)
	}
	spineCLI(t, "", "run", "--guest", "data", "--file", dir+"sales.csv", dir+"numpy_pandas_sympy.py").check(t, 0, string(want))
}
