package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunOutWritesEveryValidFile: --out DIR writes every file of the run it
// can, lists the ones it refuses (a name with a control character) with why,
// and exits 4 as a failure; --json says which were written and which refused.
func TestRunOutWritesEveryValidFile(t *testing.T) {
	prog := `import os
os.makedirs("b")
for name in ["a.txt", "bad\x01name.txt", "b/c.txt", "m\x7f.txt", "z.txt"]:
    open(name, "w").write(name[:1])
`
	out := filepath.Join(t.TempDir(), "out")
	r := spineCLI(t, prog, "run", "--out", out, "-")
	r.check(t, exitFailure, "", "--out: 2 of the 5 files not written",
		"not written: bad\x01name.txt: ", "not written: m\x7f.txt: ",
		"wrote "+filepath.Join(out, "a.txt")+" (1 bytes)", "wrote "+filepath.Join(out, "b", "c.txt"), "wrote "+filepath.Join(out, "z.txt"))
	for name, want := range map[string]string{"a.txt": "a", "b/c.txt": "b", "z.txt": "z"} {
		if got := string(readFile(t, filepath.Join(out, filepath.FromSlash(name)))); got != want {
			t.Fatalf("%s = %q, want %q", name, got, want)
		}
	}
	if entries, _ := os.ReadDir(out); len(entries) != 3 {
		t.Fatalf("--out holds %d entries, want a.txt, b and z.txt", len(entries))
	}

	r = spineCLI(t, prog, "run", "--json", "--out", filepath.Join(t.TempDir(), "out2"), "-")
	if !strings.Contains(r.stdout, `"refused": [`) || !strings.Contains(r.stdout, `"name": "bad\u0001name.txt"`) ||
		strings.Count(r.stdout, "out2/") != 3 || r.code != exitFailure {
		t.Fatalf("--json: exit %d\n%s", r.code, r.stdout)
	}
}
