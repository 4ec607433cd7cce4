package main

import (
	"os"
	"strings"
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

// TestRunDataGuestFrameValue: a program ending in df.head() prints the frame
// as IPython's Out[ ] shows it (its repr) and exits 0; --json has the value
// (null: a DataFrame has no faithful JSON form) and the display, with pandas'
// text/html beside the text/plain.
func TestRunDataGuestFrameValue(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the data Guest in a subprocess")
	}
	const prog = "import pandas as pd\ndf = pd.DataFrame({'qty': [3, 1, 2], 'item': ['pen', 'ink', 'pad']})\nprint(df.qty.sum())\ndf.head()\n"
	const frame = "   qty item\n0    3  pen\n1    1  ink\n2    2  pad\n"
	spineCLI(t, prog, "run", "--guest", "data", "-").check(t, 0, "6\n"+frame)
	res := decodeJSON(t, spineCLI(t, prog, "run", "--guest", "data", "--json", "-"))
	if string(res.Value) != "null" || res.Display["text/plain"]+"\n" != frame || !strings.Contains(res.Display["text/html"], "<table") {
		t.Errorf("value %s, display %q", res.Value, res.Display)
	}
}
