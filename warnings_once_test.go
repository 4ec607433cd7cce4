package spine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/spine-run/spine"
)

// TestParserWarningsOnce: a parser warning (an invalid escape, visible with
// the filename __main__.py) is printed once, with early reads off, on and in
// prefix mode alike, also when the early-read pass gives up on a tree too deep
// for it (a long chain of not, which may end in RecursionError).
func TestParserWarningsOnce(t *testing.T) {
	r := shared(t)
	for _, depth := range []int{300, 591, 900} {
		for i, tmpl := range []string{
			"s = '\\d'\nv = lookup(key='book')\nx = %s1\nresult = s\n",
			"s = '\\d'\nx = lookup(key=str(%s1))\n",
		} {
			src := fmt.Sprintf(tmpl, strings.Repeat("not ", depth))
			var first string
			for _, mode := range []string{"off", "early reads", "prefix"} {
				req := spine.Request{Source: src, Filename: "__main__.py", EarlyReads: mode != "off"}
				if mode == "prefix" {
					req.Source, req.Stream = "", strings.NewReader(src)
				}
				out, _ := r.Run(context.Background(), req)
				if out == nil {
					t.Fatalf("depth %d, program %d, %s: no output", depth, i, mode)
				}
				if n := strings.Count(out.Stderr, "DeprecationWarning: invalid escape sequence"); n != 1 {
					t.Fatalf("depth %d, program %d, %s: the warning printed %d times: %q", depth, i, mode, n, out.Stderr)
				}
				if mode == "off" {
					first = out.Stderr
				} else if out.Stderr != first {
					t.Fatalf("depth %d, program %d, %s: stderr %q, with early reads off %q", depth, i, mode, out.Stderr, first)
				}
			}
		}
	}
}
