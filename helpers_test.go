package spine

// The white-box tests' helpers: their tools, a Runner and a session's step.
// They cannot import spinetest, which imports this package; the black-box
// suites (package spine_test) use spinetest and suites_test.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

// prices is the data behind the test lookup tool.
var prices = map[string]int{"book": 21, "pen": 2}

func lookupTool(ctx context.Context, args json.RawMessage) (any, error) {
	var a struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, err
	}
	if p, ok := prices[a.Key]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("no such key: %s", a.Key)
}

// testManifest is the tools of the white-box tests: lookup, echo and fail.
func testManifest() Manifest {
	return Manifest{
		"lookup": {Call: lookupTool, AllowEarlyRead: true, Description: "Look up a price by key."},
		"echo":   {Call: func(ctx context.Context, args json.RawMessage) (any, error) { return args, nil }},
		"fail":   {Call: func(ctx context.Context, args json.RawMessage) (any, error) { return nil, errors.New("boom") }},
	}
}

// newRunner returns a Runner of m, closed when the test ends (spinetest.NewRunner).
func newRunner(t testing.TB, m Manifest, opts *Options) *Runner {
	t.Helper()
	r, err := New(context.Background(), m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// newSession starts a session of r, closed when the test ends
// (spinetest.NewSession).
func newSession(t testing.TB, r *Runner) *Session {
	t.Helper()
	s, err := r.NewSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// step runs src in s and returns its value, failing the test on any error
// (spinetest.Step).
func step(t testing.TB, s *Session, src string) string {
	t.Helper()
	out, err := s.Run(context.Background(), Request{Source: src})
	if err != nil {
		t.Fatalf("%q: %v", src, err)
	}
	return string(out.Value)
}
