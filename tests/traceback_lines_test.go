package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestTracebackLines: a traceback shows the failing line, and its carets
// under the failing expression, whether or not the program ends in a newline,
// whatever newlines it uses, and with the characters str.splitlines would
// take for line ends inside it.
func TestTracebackLines(t *testing.T) {
	const carets = "    y = x + undefined_name\n            ^^^^^^^^^^^^^^\n"
	for _, c := range []struct{ name, src, want string }{
		{"trailing newline", "x = 1\ny = x + undefined_name\n", carets},
		{"no trailing newline", "x = 1\ny = x + undefined_name", carets},
		{"CRLF, none at the end", "x = 1\r\ny = x + undefined_name", carets},
		{"CR", "x = 1\ry = x + undefined_name\r", carets},
		{"a line separator in a string", "x = '\u2028\x0c\x1c'\ny = x + undefined_name", carets},
		{"indented, last line", "x = 1\nif x:\n    y = x + undefined_name", "    y = x + undefined_name\n            ^^^^^^^^^^^^^^\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := shared(t).Run(context.Background(), spine.Request{Source: c.src})
			pe := spinetest.PythonError(t, err)
			if pe.Type != "NameError" || !strings.Contains(pe.Traceback, c.want) {
				t.Fatalf("traceback %q, want it to hold %q", pe.Traceback, c.want)
			}
		})
	}
}
