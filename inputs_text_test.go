package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/spine-run/spine"
)

// TestInputsPythonCannotDecode: inputs with an integer longer than Python
// converts, or with text that is not UTF-8, are the caller's mistake
// (ErrBadRequest, before the run), not the Guest's failure; an integer at the
// limit, a long float and escaped text reach the program as sent.
func TestInputsPythonCannotDecode(t *testing.T) {
	r := shared(t)
	digits := func(n int) string { return "1" + strings.Repeat("0", n-1) }
	for _, c := range []struct {
		name, inputs, want string
	}{
		{"an integer over the limit", `{"n": ` + digits(5000) + `}`, "integer of 5000 digits"},
		{"a negative integer over the limit", `{"n": [1, -` + digits(4301) + `]}`, "integer of 4301 digits"},
		{"invalid UTF-8 in a string", "{\"s\": \"caf\xe9\"}", "not valid UTF-8"},
		{"invalid UTF-8 in a key", "{\"\xff\": 1}", "not valid UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Run(context.Background(), spine.Request{Source: "result = 1", Inputs: json.RawMessage(c.inputs)})
			if !errors.Is(err, spine.ErrBadRequest) || spine.Classify(err) != spine.OutcomeBadRequest || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a bad request naming %q", err, c.want)
			}
		})
	}
	for _, c := range []struct{ name, inputs, src, want string }{
		{"an integer at the limit", `{"n": ` + digits(4300) + `}`, "result = len(str(inputs['n']))", "4300"},
		{"a long float", `{"x": 1.` + strings.Repeat("5", 5000) + `e2}`, "result = inputs['x']", "155.55555555555554"},
		{"digits in a string", `{"s": "` + digits(5000) + `\u00e9"}`, "result = len(inputs['s'])", "5001"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := r.Run(context.Background(), spine.Request{Source: c.src, Inputs: json.RawMessage(c.inputs)})
			if err != nil || string(out.Value) != c.want {
				t.Fatalf("got %v %s, want %s", err, valueOf(out), c.want)
			}
		})
	}
}
