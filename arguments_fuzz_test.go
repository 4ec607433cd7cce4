package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/spine-run/spine"
)

// FuzzValidateArguments: whatever arguments a program sends to a checked
// tool, the check answers nil (and the tool is called) or an
// *ArgumentError (and it is not), and never panics.
func FuzzValidateArguments(f *testing.F) {
	for _, seed := range []string{`{}`, `{"q":"a","n":3}`, `{"q":7}`, `{"n":-1}`, `{"tags":["a",1]}`, `{"o":{"x":"b"}}`,
		`{"mode":"z"}`, `[1]`, `null`, `{"n":1e400}`, `{"q":"` + "\xff" + `"}`, `{"o":{"x":"a","y":1}}`} {
		f.Add([]byte(seed))
	}
	schema := json.RawMessage(`{"type":"object","properties":{
		"q":{"type":"string","minLength":1,"maxLength":8},
		"n":{"type":"integer","minimum":0,"exclusiveMaximum":100},
		"tags":{"type":"array","items":{"type":"string"},"maxItems":3},
		"mode":{"enum":["a","b",null]},
		"o":{"type":"object","properties":{"x":{"type":"string","pattern":"^a"}},"additionalProperties":false}},
		"required":["q"]}`)
	var called bool
	spec, err := spine.ValidateArguments(spine.ToolSpec{InputSchema: schema, Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		called = true
		return nil, nil
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		called = false
		_, err := spec.Call(context.Background(), args)
		var argErr *spine.ArgumentError
		switch {
		case err == nil && !called:
			t.Fatalf("%q: no error, and the tool was not called", args)
		case err != nil && (called || !errors.As(err, &argErr) || argErr.Message == ""):
			t.Fatalf("%q: %v (called %v)", args, err, called)
		}
	})
}

// TestValidateArgumentsWords: each kind of mistake in a checked tool's
// arguments is told in the words of a Python TypeError, naming the argument.
func TestValidateArgumentsWords(t *testing.T) {
	spec, err := spine.ValidateArguments(spine.ToolSpec{Call: func(ctx context.Context, args json.RawMessage) (any, error) { return "ok", nil },
		InputSchema: json.RawMessage(`{"type":"object","properties":{
			"q":{"type":"string","minLength":2},"n":{"type":"integer","minimum":0,"maximum":9},
			"tags":{"type":"array","items":{"type":"string"},"maxItems":1},"mode":{"enum":["a","b"]},
			"o":{"type":"object","properties":{"x":{"type":"string","pattern":"^a"}}}},"required":["q"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, want string }{
		{`{"q":"ab","n":"3"}`, "argument 'n' must be int, not str"},
		{`{"q":"ab","n":10}`, "argument 'n' must be <= 9, not 10"},
		{`{"q":"ab","n":-1}`, "argument 'n' must be >= 0, not -1"},
		{`{"q":"a"}`, "argument 'q' must have at least 2 characters, not 1"},
		{`{"q":"ab","tags":["x","y"]}`, "argument 'tags' must have at most 1 item, not 2"},
		{`{"q":"ab","mode":"c"}`, "argument 'mode' must be one of 'a', 'b', not 'c'"},
		{`{"q":"ab","o":{"x":"b"}}`, `argument 'o.x' does not fit the tool's schema (its "pattern")`},
		{`{}`, "missing 1 required keyword-only argument: 'q'"},
		{`[1]`, "arguments must be a dict, not list"},
		{`{"q":"ab"} 2`, "arguments are not one JSON object"},
	} {
		_, err := spec.Call(context.Background(), json.RawMessage(c.args))
		var argErr *spine.ArgumentError
		if !errors.As(err, &argErr) || argErr.Message != c.want {
			t.Errorf("%s: %v, want %s", c.args, err, c.want)
		}
	}
	if v, err := spec.Call(context.Background(), json.RawMessage(`{"q":"ab","n":3,"o":{"x":"a"}}`)); err != nil || v != "ok" {
		t.Errorf("good arguments: %v %v", v, err)
	}
}
