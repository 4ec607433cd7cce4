package housekeeping

import (
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestOverLimits checks the checker on made-up files: one within the limits,
// one with a function too long, one with a literal too long, one too long.
func TestOverLimits(t *testing.T) {
	body := func(lines int) string { return strings.Repeat("\tx++\n", lines) }
	cases := []struct {
		name, src string
		want      []string // substrings of the problems, in order
	}{
		{"fits", "package p\n\nfunc f() {\n\tx := 0\n" + body(maxFuncLines-3) + "}\n", nil},
		{"long func", "package p\n\nfunc f() {\n\tx := 0\n" + body(maxFuncLines-2) + "}\n", []string{"line 3: f is 121 lines"}},
		{"long literal", "package p\n\nvar g = func() {\n\tx := 0\n" + body(maxFuncLines) + "}\n", []string{"a function literal is 123 lines"}},
		{"long file", "package p\n" + strings.Repeat("\n", maxFileLines), []string{"701 lines, over the limit of 700"}},
	}
	for _, c := range cases {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, c.name+".go", c.src, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := overLimits(fset, f)
		if len(got) != len(c.want) {
			t.Errorf("%s: got %q, want %d problems", c.name, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: problem %q does not say %q", c.name, got[i], w)
			}
		}
	}
}
