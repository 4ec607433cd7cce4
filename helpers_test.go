package spine

// The white-box tests' helpers: their tools, a shared Runner, and running
// a program or a session's step. (The black-box suites use spinetest.)

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
)

var (
	sharedOnce   sync.Once
	sharedRunner *Runner
	sharedErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedRunner != nil {
		sharedRunner.Close(context.Background())
	}
	for _, f := range testExit {
		f()
	}
	os.Exit(code)
}

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
// (The black-box suites have theirs in suites_test.go.)
func testManifest() Manifest {
	return Manifest{
		"lookup": {Call: lookupTool, AllowEarlyRead: true, Description: "Look up a price by key."},
		"echo":   {Call: func(ctx context.Context, args json.RawMessage) (any, error) { return args, nil }},
		"fail":   {Call: func(ctx context.Context, args json.RawMessage) (any, error) { return nil, errors.New("boom") }},
	}
}

// shared is one Runner of the test manifest with the default options, made
// once for the tests that need nothing else; compiled code is cached on disk
// beside the user's cache as usual.
func shared(t testing.TB) *Runner {
	t.Helper()
	sharedOnce.Do(func() {
		sharedRunner, sharedErr = New(context.Background(), testManifest(), nil)
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedRunner
}

func newRunner(t testing.TB, m Manifest, opts *Options) *Runner {
	t.Helper()
	r, err := New(context.Background(), m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func run(t testing.TB, r *Runner, src string, inputs any) (*Output, error) {
	t.Helper()
	return r.Run(context.Background(), Request{Source: src, Inputs: inputs})
}

// mustRun runs req on r and fails t unless the run succeeds; a Python error's
// traceback goes in the failure. (The black-box suites use spinetest.MustRun.)
func mustRun(t testing.TB, r *Runner, req Request) *Output {
	t.Helper()
	out, err := r.Run(context.Background(), req)
	if err != nil {
		var pe *PythonError
		if errors.As(err, &pe) {
			t.Fatalf("run failed: %v\n%s", err, pe.Traceback)
		}
		t.Fatalf("run failed: %v", err)
	}
	return out
}

func pythonError(t testing.TB, err error) *PythonError {
	t.Helper()
	var pe *PythonError
	if !errors.As(err, &pe) {
		t.Fatalf("want a *PythonError, got %v", err)
	}
	return pe
}

// newSession starts a session of r, closed when the test ends. (The black-box
// suites use spinetest.NewSession and spinetest.Step.)
func newSession(t testing.TB, r *Runner) *Session {
	t.Helper()
	s, err := r.NewSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// step runs src in s and returns its value, failing the test on any error.
func step(t testing.TB, s *Session, src string) string {
	t.Helper()
	out, err := s.Run(context.Background(), Request{Source: src})
	if err != nil {
		t.Fatalf("%q: %v", src, err)
	}
	return string(out.Value)
}

// valueOf is out's value as text, for a failure's message.
func valueOf(out *Output) string {
	if out == nil {
		return "(no output)"
	}
	return string(out.Value)
}
