// Package spinetest is what the tests of Spine's packages share: the test
// tools and a Runner made with them, a gate that holds a program inside a
// tool until the test lets it go, the manifest and the shared Runner of the
// black-box suites (suite.go), the chained reads' tools (chain.go), the test
// MCP server, and small helpers for HTTP, MCP sessions, metrics and waiting.
//
// The root package's white-box tests cannot import it (it imports the root
// package); they keep their few helpers in helpers_test.go. Its black-box
// tests (package spine_test) and the Guest's suites (package tests) use it.
package spinetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/engine"
)

// Prices are what lookup knows.
var Prices = map[string]int{"book": 21, "pen": 2}

// LookupDescription is lookup's description, which shows in its stub.
const LookupDescription = "Look up the price of an item by key."

// Tools are the test tools and the channels a test watches them with. Each
// test package makes its own.
type Tools struct {
	// Lookups receives the key of every lookup call while it has room
	// (1024); calls are never held up by it.
	Lookups chan string
	// Gate holds the calls of the gate tool.
	Gate *Gate
}

// NewTools returns the test tools with empty channels.
func NewTools() *Tools {
	return &Tools{Lookups: make(chan string, 1024), Gate: NewGate()}
}

// Manifest returns the tools as a manifest:
//
//	lookup(key: str)  the price of key in Prices, or the tool error
//	                     `no such key: "KEY"`; allowed to read early
//	gate(wait=True)   see Gate
func (t *Tools) Manifest() spine.Manifest {
	return spine.Manifest{
		"lookup": {
			Call:           t.lookup,
			AllowEarlyRead: true,
			Description:    LookupDescription,
			InputSchema:    json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}`),
		},
		"gate": t.Gate.Tool(),
	}
}

func (t *Tools) lookup(ctx context.Context, args json.RawMessage) (any, error) {
	var a struct{ Key string }
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, err
	}
	select {
	case t.Lookups <- a.Key:
	default:
	}
	if p, ok := Prices[a.Key]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("no such key: %q", a.Key)
}

// DrainLookups empties t.Lookups, for a test that waits for the next one.
func (t *Tools) DrainLookups() {
	for {
		select {
		case <-t.Lookups:
		default:
			return
		}
	}
}

// Gate is a tool that tells the test a program has reached it and, unless
// called as gate(wait=False), holds the program there until the test lets
// it through. A test uses it to know that a run is in flight (it holds a
// slot, it can be cancelled) without a sleep.
type Gate struct {
	// Entered receives once for every call, as the call begins (it has
	// room for 64 calls the test has not taken yet).
	Entered chan struct{}

	open      chan struct{}
	openOnce  sync.Once
	allOpened chan struct{}
}

// NewGate returns a closed gate.
func NewGate() *Gate {
	return &Gate{Entered: make(chan struct{}, 64), open: make(chan struct{}), allOpened: make(chan struct{})}
}

// Tool is the gate as a tool: it returns "opened" once let through, "passed"
// when called with wait=False, or its context's error when that ends first.
func (g *Gate) Tool() spine.ToolSpec {
	return spine.ToolSpec{
		Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			var a struct{ Wait *bool }
			if len(args) > 0 {
				if err := json.Unmarshal(args, &a); err != nil {
					return nil, err
				}
			}
			g.Entered <- struct{}{}
			if a.Wait != nil && !*a.Wait {
				return "passed", nil
			}
			select {
			case <-g.open:
				return "opened", nil
			case <-g.allOpened:
				return "opened", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
		Description: "Tell the test the program got here; unless wait is false, wait until the test opens the gate.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"wait":{"type":"boolean","default":true}}}`),
	}
}

// Let lets one call through: one waiting now, or else the next one. It
// returns once a call has taken its turn.
func (g *Gate) Let() { g.open <- struct{}{} }

// Open lets every call through, those waiting and all later ones.
func (g *Gate) Open() { g.openOnce.Do(func() { close(g.allOpened) }) }

// NewRunner returns a Runner of manifest, closed when the test ends.
func NewRunner(tb testing.TB, manifest spine.Manifest, opts *spine.Options) *spine.Runner {
	tb.Helper()
	r, err := spine.New(tb.Context(), manifest, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// PoolRunner returns a Runner of the test tools with one pooled instance,
// so consecutive runs reuse the same Guest; it skips the test where
// instances are not reused (no copy-on-write images).
func PoolRunner(tb testing.TB) *spine.Runner {
	tb.Helper()
	if !engine.COWSupported {
		tb.Skip("instances are reused only with copy-on-write images")
	}
	return NewRunner(tb, NewTools().Manifest(), &spine.Options{PoolSize: 1})
}

// MustRun runs req on r and fails tb unless the run succeeds; a Python
// error's traceback goes in the failure.
func MustRun(tb testing.TB, r *spine.Runner, req spine.Request) *spine.Output {
	tb.Helper()
	out, err := r.Run(context.Background(), req)
	if err != nil {
		var pe *spine.PythonError
		if errors.As(err, &pe) {
			tb.Fatalf("run failed: %v\n%s", err, pe.Traceback)
		}
		tb.Fatalf("run failed: %v", err)
	}
	return out
}

// NewSession starts a session of r, closed when the test ends.
func NewSession(tb testing.TB, r *spine.Runner) *spine.Session {
	tb.Helper()
	s, err := r.NewSession(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// Step runs src in s and returns its value, failing tb on any error.
func Step(tb testing.TB, s *spine.Session, src string) string {
	tb.Helper()
	out, err := s.Run(context.Background(), spine.Request{Source: src})
	if err != nil {
		tb.Fatalf("%q: %v", src, err)
	}
	return string(out.Value)
}

// PythonError returns err as a *spine.PythonError, failing tb if it is not one.
func PythonError(tb testing.TB, err error) *spine.PythonError {
	tb.Helper()
	var pe *spine.PythonError
	if !errors.As(err, &pe) {
		tb.Fatalf("want a *spine.PythonError, got %v", err)
	}
	return pe
}

// Main is a TestMain for a package whose tests share one Runner: it sets
// *runner to a Runner of manifest, runs the tests, closes the Runner and
// exits with the tests' code.
func Main(m *testing.M, runner **spine.Runner, manifest spine.Manifest, opts *spine.Options) {
	ctx := context.Background()
	r, err := spine.New(ctx, manifest, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spine.New:", err)
		os.Exit(1)
	}
	*runner = r
	code := m.Run()
	r.Close(ctx)
	os.Exit(code)
}

// ErrReader is a stream (a Request's Stream) that fails with
// ErrConnectionReset.
type ErrReader struct{}

// ErrConnectionReset is ErrReader's error.
var ErrConnectionReset = errors.New("connection reset")

func (ErrReader) Read([]byte) (int, error) { return 0, ErrConnectionReset }

// ServeHTTP serves h on a loopback port until the test ends.
func ServeHTTP(tb testing.TB, h http.Handler) *httptest.Server {
	tb.Helper()
	ts := httptest.NewServer(h)
	tb.Cleanup(ts.Close)
	return ts
}

// WaitFor polls cond until it holds. It is for states that announce
// themselves nowhere a test can wait on (a gauge, a goroutine count, a
// process coming back); where a tool or a log can signal, wait on that
// instead. There is no deadline: the test binary's -timeout bounds the wait,
// so a slow machine makes a test slow, never failed. A test that times out
// there shows what it was waiting for in its log. It works in Cleanup
// functions too.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for i := 0; !cond(); i++ {
		if i == 10_000 { // about 10 s
			tb.Logf("still waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
