package spine_test

import (
	"context"
	"encoding/base64"
	"reflect"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// TestValueDisplay: no run fails because of its value's type. A value keeps
// its JSON (the same bytes as ever for plain JSON data) when it has a
// faithful one, and gets a display as a notebook's Out[ ]: text/plain, its
// repr, and the formats its object offers.
func TestValueDisplay(t *testing.T) {
	r := spinetest.NewRunner(t, nil, nil)
	const classes = `class Html:
    def _repr_html_(self):
        return "<b>bold</b>"
    def __repr__(self):
        return "Html()"
class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/markdown": "*md*", "application/json": {"k": [1]}}, {}
    def _repr_html_(self):
        return "<i>not asked: the bundle has no text/html, so this fills it</i>"
class Png:
    def _repr_png_(self):
        return b"\x89PNG"
class Broken:
    def __repr__(self):
        raise ValueError("no repr")
    def _repr_html_(self):
        raise RuntimeError("no html")
class Everything:
    def __getattr__(self, name):
        return lambda *a, **k: "<claimed>"
    def __repr__(self):
        return "Everything()"
`
	for _, c := range []struct {
		name, src string
		value     string
		display   spine.Display
		stderr    string
	}{
		{"None", "None", "null", nil, ""},
		{"plain JSON keeps its bytes", `{"a": [1, 2.5, "é", None, True], 3: (4, 5)}`,
			`{"a":[1,2.5,"é",null,true],"3":[4,5]}`, spine.Display{"text/plain": "{'a': [1, 2.5, 'é', None, True], 3: (4, 5)}"}, ""},
		{"set", "{3, 1, 2}", "[1,2,3]", spine.Display{"text/plain": "{1, 2, 3}"}, ""},
		{"NaN", "float('nan')", "null", spine.Display{"text/plain": "nan"}, ""},
		{"complex", "1j", "null", spine.Display{"text/plain": "1j"}, ""},
		{"tuple keys", "{(1, 2): 3}", "null", spine.Display{"text/plain": "{(1, 2): 3}"}, ""},
		{"bytes", "b'ab'", "null", spine.Display{"text/plain": "b'ab'"}, ""},
		{"html", "Html()", "null", spine.Display{"text/plain": "Html()", "text/html": "<b>bold</b>"}, ""},
		{"result global", "result = [Html()]\n1", "null", spine.Display{"text/plain": "[Html()]"}, ""},
		{"mime bundle", "Bundle()", "null", spine.Display{"text/plain": "<__main__.Bundle object>", "text/markdown": "*md*",
			"application/json": `{"k":[1]}`, "text/html": "<i>not asked: the bundle has no text/html, so this fills it</i>"}, ""},
		{"png", "Png()", "null", spine.Display{"text/plain": "<__main__.Png object>", "image/png": base64.StdEncoding.EncodeToString([]byte("\x89PNG"))}, ""},
		{"a class is shown by its repr", "Html", "null", spine.Display{"text/plain": "<class '__main__.Html'>"}, ""},
		{"an object that claims every name", "Everything()", "null", spine.Display{"text/plain": "Everything()"}, ""},
		{"broken formatters", "Broken()", "null", spine.Display{"text/plain": "<__main__.Broken object>"},
			"Broken._repr_html_ raised RuntimeError: no html; that format is left out\nBroken.__repr__ raised ValueError: no repr; that format is left out\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := spinetest.MustRun(t, r, spine.Request{Source: classes + c.src})
			if string(out.Value) != c.value {
				t.Errorf("value %s, want %s", out.Value, c.value)
			}
			got := out.Display
			if p := got.Text(); strings.Contains(p, " object at 0x") { // the address varies
				got["text/plain"] = p[:strings.Index(p, " at 0x")] + ">"
			}
			if !reflect.DeepEqual(got, c.display) {
				t.Errorf("display %q, want %q", got, c.display)
			}
			if out.Stderr != c.stderr {
				t.Errorf("stderr %q, want %q", out.Stderr, c.stderr)
			}
		})
	}
}

// TestDisplayCalls: display(x), as in IPython, keeps each object's display in
// order and prints its text/plain; what was displayed before an exception is
// kept with the error.
func TestDisplayCalls(t *testing.T) {
	r := spinetest.NewRunner(t, nil, nil)
	src := `class Html:
    def _repr_html_(self):
        return "<p>x</p>"
    def __repr__(self):
        return "Html()"
print("before")
display(Html(), {1})
display({"text/plain": "raw text", "text/html": "<i>raw</i>"}, raw=True)
display(Html(), exclude=["text/html"])
print("after")
`
	out := spinetest.MustRun(t, r, spine.Request{Source: src + "None"})
	want := []spine.Display{
		{"text/plain": "Html()", "text/html": "<p>x</p>"},
		{"text/plain": "{1}"},
		{"text/plain": "raw text", "text/html": "<i>raw</i>"},
		{"text/plain": "Html()"},
	}
	if !reflect.DeepEqual(out.Displayed, want) || out.Display != nil {
		t.Errorf("displayed %q, display %q", out.Displayed, out.Display)
	}
	if out.Stdout != "before\nHtml()\n{1}\nraw text\nHtml()\nafter\n" {
		t.Errorf("stdout %q", out.Stdout)
	}
	out, err := r.Run(context.Background(), spine.Request{Source: src + "1/0"})
	if spinetest.PythonError(t, err).Type != "ZeroDivisionError" || !reflect.DeepEqual(out.Displayed, want) {
		t.Errorf("after an error: displayed %q (%v)", out.Displayed, err)
	}

	// Bounded: text/plain to 64 Ki characters; the displays together, and the
	// value's display, each to MaxResult, past which displays are left out
	// and counted.
	small := spinetest.NewRunner(t, nil, &spine.Options{MaxResult: 4096})
	out = spinetest.MustRun(t, small, spine.Request{Source: "for i in range(10):\n    display('x' * 1000)\n[1j, 'y' * 100_000]"})
	if len(out.Displayed) != 4 || out.DisplayedLeftOut != 6 { // each takes 1,019 bytes of 4,096
		t.Errorf("%d displays kept, %d left out", len(out.Displayed), out.DisplayedLeftOut)
	}
	if p := out.Display.Text(); len(p) > 4096 || !strings.HasSuffix(p, "... [truncated]") || string(out.Value) != "null" {
		t.Errorf("the value's display (%d characters) %.40q..., value %.20s", len(p), p, out.Value)
	}
	out = spinetest.MustRun(t, r, spine.Request{Source: "display('x' * 100_000)"})
	if p := out.Displayed[0].Text(); len(p) != 1<<16+len("... [truncated]") {
		t.Errorf("text/plain of %d characters", len(p))
	}
}
