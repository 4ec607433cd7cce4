package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The tests in this file run programs in the real Guest: the embedded CPython
// artifact under wazero, through Runner.Run.

func TestGuestSeedDemo(t *testing.T) {
	out := spinetest.MustRun(t, shared(t), spine.Request{Source: `price = lookup(key="book")
result = price * inputs["quantity"]
`, Inputs: map[string]any{"quantity": 3}})
	if string(out.Value) != "63" {
		t.Fatalf("value = %s, want 63", out.Value)
	}
	if out.ToolCalls != 1 {
		t.Fatalf("ToolCalls = %d, want 1", out.ToolCalls)
	}
}

func TestGuestValues(t *testing.T) {
	r := shared(t)
	for _, tc := range []struct{ name, src, want string }{
		{"result", `result = {"a": [1, 2.5, None, True], "b": "é"}`, `{"a":[1,2.5,null,true],"b":"é"}`},
		{"last expression", "x = 20\nx + 1", "21"},
		{"result wins over last expression", "result = 1\n2", "1"},
		{"no value", "x = 1", "null"},
		{"empty program", "", "null"},
		{"tool null", `nothing()`, "null"},
		{"tool value", `lookup(key="pen")`, "2"},
		{"echo keeps arguments", `echo(a=[1, {"b": None}], s="\u00e9")`, `{"a":[1,{"b":null}],"s":"é"}`},
		{"namespace", `market.get_price(symbol="ACME")`, `{"price":104,"symbol":"ACME"}`},
		{"inputs default", `inputs`, `{}`},
		{"exit 0 is a normal end", "result = 5\nexit()\nresult = 6", "5"},
		{"lone surrogate", `"\ud800"`, `"\ud800"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := spinetest.MustRun(t, r, spine.Request{Source: tc.src})
			if string(out.Value) != tc.want {
				t.Fatalf("value = %s, want %s", out.Value, tc.want)
			}
		})
	}
}

func TestGuestToolErrors(t *testing.T) {
	r := shared(t)
	t.Run("caught", func(t *testing.T) {
		out := spinetest.MustRun(t, r, spine.Request{Source: `try:
    lookup(key="nope")
except RuntimeError as e:
    result = str(e)
`})
		if string(out.Value) != `"no such key: \"nope\""` {
			t.Fatalf("value = %s", out.Value)
		}
	})
	t.Run("uncaught", func(t *testing.T) {
		_, err := r.Run(context.Background(), spine.Request{Source: "x = 1\nfail()\n"})
		pe := spinetest.PythonError(t, err)
		if pe.Type != "RuntimeError" || pe.Message != "boom" || pe.Line != 2 {
			t.Fatalf("got %#v", pe)
		}
		if !strings.Contains(pe.Traceback, `File "<agent>", line 2, in <module>`) || !strings.Contains(pe.Traceback, "fail()") {
			t.Fatalf("traceback does not point into the source:\n%s", pe.Traceback)
		}
		if strings.Contains(pe.Traceback, "bootstrap") {
			t.Fatalf("traceback shows Guest internals:\n%s", pe.Traceback)
		}
	})
	t.Run("panicking tool", func(t *testing.T) {
		out := spinetest.MustRun(t, r, spine.Request{Source: `try:
    explode()
except RuntimeError as e:
    result = str(e)
`})
		if !strings.Contains(string(out.Value), "tool panicked: kaboom") {
			t.Fatalf("value = %s", out.Value)
		}
	})
	t.Run("tool result not JSON", func(t *testing.T) {
		_, err := r.Run(context.Background(), spine.Request{Source: "unencodable()"})
		pe := spinetest.PythonError(t, err)
		if pe.Type != "RuntimeError" || !strings.HasPrefix(pe.Message, "tool result is not JSON") {
			t.Fatalf("got %#v", pe)
		}
	})
	t.Run("response over 1 MiB", func(t *testing.T) {
		_, err := r.Run(context.Background(), spine.Request{Source: "huge()"})
		pe := spinetest.PythonError(t, err)
		if pe.Type != "RuntimeError" || !strings.Contains(pe.Message, "1 MiB") {
			t.Fatalf("got %#v", pe)
		}
	})
	t.Run("positional arguments", func(t *testing.T) {
		// echo has no input schema, so its parameters have no order.
		_, err := r.Run(context.Background(), spine.Request{Source: `echo("book")`})
		pe := spinetest.PythonError(t, err)
		if pe.Type != "TypeError" || !strings.Contains(pe.Message, "echo() takes keyword arguments only") {
			t.Fatalf("got %#v", pe)
		}
	})
	t.Run("arguments not JSON", func(t *testing.T) {
		_, err := r.Run(context.Background(), spine.Request{Source: `echo(x={1, 2})`})
		pe := spinetest.PythonError(t, err)
		if pe.Type != "TypeError" || !strings.Contains(pe.Message, "echo() must be JSON-encodable") {
			t.Fatalf("got %#v", pe)
		}
	})
}

func TestGuestRawBridge(t *testing.T) {
	r := shared(t)
	for _, tc := range []struct{ name, src, want string }{
		{"unknown tool", `import _spine
result = _spine.call(b'{"tool": "rm_rf", "args": {}}').decode()`, `"{\"value\":null,\"error\":\"unknown tool: rm_rf\"}"`},
		{"empty tool name", `import _spine
result = _spine.call(b'{"tool": "", "args": {}}').decode()`, `"{\"value\":null,\"error\":\"unknown tool: \"}"`},
		{"malformed request", `import _spine
result = _spine.call(b'{"tool": ').decode()`, `"{\"value\":null,\"error\":\"unexpected end of JSON input\"}"`},
		{"prepare with early reads off", `import _spine
result = _spine.prepare(b'{"tool": "lookup", "args": {"key": "book"}}')`, `0`},
		{"resolve id 0 is a call", `import _spine
result = _spine.resolve(0, b'{"tool": "lookup", "args": {"key": "book"}}').decode()`, `"{\"value\":21}"`},
		{"bad argument type", `import _spine
try:
    _spine.call("not bytes")
except TypeError as e:
    result = "TypeError"`, `"TypeError"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := spinetest.MustRun(t, r, spine.Request{Source: tc.src})
			if string(out.Value) != tc.want {
				t.Fatalf("value = %s, want %s", out.Value, tc.want)
			}
		})
	}
}

func TestGuestEarlyReadsThroughRawBridge(t *testing.T) {
	var calls atomic.Int32
	lookup := spinetest.NewTools().Manifest()["lookup"].Call
	r := spinetest.NewRunner(t, spine.Manifest{"lookup": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		calls.Add(1)
		return lookup(ctx, args)
	}, AllowEarlyRead: true}}, nil)
	src := `import _spine, bootstrap
req = b'{"tool":"lookup","args":{"key":"book"}}'
h = _spine.prepare(req)
assert h != 0, h
result = [bootstrap.decode(_spine.resolve(h, req)), bootstrap.decode(_spine.resolve(h, req))]
`
	out, err := r.Run(context.Background(), spine.Request{Source: src, EarlyReads: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != "[21,21]" || calls.Load() != 2 || out.ToolCalls != 2 {
		t.Fatalf("value %s, tool ran %d times, ToolCalls %d", out.Value, calls.Load(), out.ToolCalls)
	}
}

func TestGuestPythonErrors(t *testing.T) {
	r := shared(t)
	for _, tc := range []struct{ name, src, typ, msg string }{
		{"syntax", "x = (1,\n", "SyntaxError", "never closed"},
		{"name", "\n\nundefined_name", "NameError", "undefined_name"},
		{"deep recursion", "def f(n):\n    return f(n + 1)\nf(0)", "RecursionError", "maximum recursion depth"},
		{"exit code", "exit(3)", "SystemExit", "3"},
		{"input", "input()", "EOFError", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Run(context.Background(), spine.Request{Source: tc.src})
			pe := spinetest.PythonError(t, err)
			if pe.Type != tc.typ || !strings.Contains(pe.Message, tc.msg) {
				t.Fatalf("got %#v", pe)
			}
		})
	}
	t.Run("traceback through functions", func(t *testing.T) {
		_, err := r.Run(context.Background(), spine.Request{Source: "def f():\n    return 1 / 0\n\nf()\n", Filename: "job.py"})
		pe := spinetest.PythonError(t, err)
		want := "Traceback (most recent call last):\n  File \"job.py\", line 4, in <module>\n    f()\n  File \"job.py\", line 2, in f\n    return 1 / 0\n"
		if !strings.HasPrefix(pe.Traceback, want) || pe.Line != 2 || pe.Type != "ZeroDivisionError" {
			t.Fatalf("got %#v", pe)
		}
	})
}

func TestGuestOutputCapture(t *testing.T) {
	out := spinetest.MustRun(t, shared(t), spine.Request{Source: `import sys, os
print("hello")
print("to stderr", file=sys.stderr)
sys.stdout.write("raw\n")
os.write(1, b"fd\n")
`})
	if out.Stdout != "hello\nraw\nfd\n" || out.Stderr != "to stderr\n" || out.StdoutTruncated || out.StderrTruncated {
		t.Fatalf("stdout %q stderr %q", out.Stdout, out.Stderr)
	}

	small := spinetest.NewRunner(t, suiteManifest(), &spine.Options{MaxOutput: 10})
	out = spinetest.MustRun(t, small, spine.Request{Source: `import sys
print("0123456789abcdef")
print("é" * 20, file=sys.stderr)
result = "done"`})
	if out.Stdout != "0123456789" || !out.StdoutTruncated {
		t.Fatalf("stdout %q truncated %v", out.Stdout, out.StdoutTruncated)
	}
	if out.Stderr != "ééééé" || !out.StderrTruncated {
		t.Fatalf("stderr %q truncated %v", out.Stderr, out.StderrTruncated)
	}
	if string(out.Value) != `"done"` {
		t.Fatalf("value %s", out.Value)
	}
}

func TestGuestNoStateLeaks(t *testing.T) {
	r := shared(t)
	probe := `import builtins, json, sys
result = [
    "secret" in globals(),
    hasattr(builtins, "leaked"),
    hasattr(json, "leaked"),
    "planted" in sys.modules,
    sys.getrecursionlimit(),
]`
	clean := spinetest.MustRun(t, r, spine.Request{Source: probe})
	spinetest.MustRun(t, r, spine.Request{Source: `import builtins, json, sys
secret = 42
builtins.leaked = "yes"
json.leaked = "yes"
sys.modules["planted"] = json
sys.setrecursionlimit(50)
`})
	out := spinetest.MustRun(t, r, spine.Request{Source: probe})
	if !strings.HasPrefix(string(clean.Value), "[false,false,false,false,") || string(out.Value) != string(clean.Value) {
		t.Fatalf("state leaked between runs: %s, clean %s", out.Value, clean.Value)
	}
}

func TestGuestSandbox(t *testing.T) {
	r := shared(t)
	for _, tc := range []struct{ name, src, want string }{
		{"host files", `open("/etc/passwd")`, "FileNotFoundError"},
		{"no links out", `import os; os.symlink("/etc/passwd", "passwd")`, "PermissionError"},
		{"stdlib is read-only", "f = open(\"/usr/local/lib/python311.zip\", \"wb\")\nf.write(b\"x\")\nf.flush()", "OSError"},
		{"environment", `import os; os.environ["HOME"]`, "KeyError"},
		{"sockets", `import socket; socket.socket().connect(("127.0.0.1", 80))`, "OSError"},
		{"subprocess", `import subprocess; subprocess.run(["ls"])`, "OSError"},
		{"os.system", `import os; os.system("ls")`, "AttributeError"},
		{"threads", `import _thread; _thread.start_new_thread(print, ())`, "RuntimeError"}, // threading.Thread: TestPythonThreads
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Run(context.Background(), spine.Request{Source: tc.src})
			pe := spinetest.PythonError(t, err)
			if pe.Type != tc.want && !(tc.want == "OSError" && strings.HasSuffix(pe.Type, "Error")) {
				t.Fatalf("got %#v, want %s", pe, tc.want)
			}
		})
	}
	out := spinetest.MustRun(t, r, spine.Request{Source: `import os, sys
result = [dict(os.environ), sys.argv, os.getcwd()]`})
	if !strings.HasPrefix(string(out.Value), `[{},`) {
		t.Fatalf("the Guest sees an environment: %s", out.Value)
	}
	// "/" is the run's scratch tree, nothing of the Host's.
	if out := spinetest.MustRun(t, r, spine.Request{Source: `import os; result = sorted(os.listdir("/"))`}); string(out.Value) != `["tmp","work"]` {
		t.Fatalf(`the Guest's "/" holds %s`, out.Value)
	}
}

func TestGuestTimeout(t *testing.T) {
	r := shared(t)
	for _, src := range []string{"while True: pass", "import time\ntime.sleep(3600)", "wait()"} {
		t.Run(src, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := r.Run(ctx, spine.Request{Source: src})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want DeadlineExceeded", err)
			}
		})
	}
	t.Run("Request.Timeout", func(t *testing.T) {
		_, err := r.Run(context.Background(), spine.Request{Source: "while True: pass", Timeout: 100 * time.Millisecond})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := r.Run(ctx, spine.Request{Source: "while True: pass"})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	})
	// The Runner keeps working.
	TestGuestSeedDemo(t)
}

func TestGuestSleepWorks(t *testing.T) {
	out := spinetest.MustRun(t, shared(t), spine.Request{Source: `import time
t = time.monotonic()
time.sleep(0.01)
result = time.monotonic() - t >= 0.01`})
	if string(out.Value) != "true" {
		t.Fatalf("value %s", out.Value)
	}
}

func TestGuestMemoryBomb(t *testing.T) {
	r := spinetest.NewRunner(t, suiteManifest(), &spine.Options{MemoryLimit: 96 << 20})
	for _, src := range []string{
		`x = bytearray(200 * 1024 * 1024)`,
		`x = [0] * (10**9)`,
		"chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))",
	} {
		t.Run(src, func(t *testing.T) {
			_, err := r.Run(context.Background(), spine.Request{Source: src})
			var pe *spine.PythonError
			if errors.As(err, &pe) {
				if pe.Type != "MemoryError" {
					t.Fatalf("got %#v", pe)
				}
			} else if !errors.Is(err, spine.ErrGuest) {
				t.Fatalf("err = %v, want MemoryError or ErrGuest", err)
			}
		})
	}
	spinetest.MustRun(t, r, spine.Request{Source: `x = bytearray(8 * 1024 * 1024)`})
}

func TestGuestToolBudget(t *testing.T) {
	r := spinetest.NewRunner(t, suiteManifest(), &spine.Options{MaxToolCalls: 3})
	out := spinetest.MustRun(t, r, spine.Request{Source: `n = 0
try:
    while True:
        lookup(key="book")
        n += 1
except RuntimeError as e:
    result = [n, str(e)]`})
	if string(out.Value) != `[3,"tool call budget exhausted"]` {
		t.Fatalf("value %s", out.Value)
	}
}

func TestGuestLimits(t *testing.T) {
	r := spinetest.NewRunner(t, suiteManifest(), &spine.Options{MaxSource: 100, MaxInputs: 50, MaxResult: 20})
	if _, err := r.Run(context.Background(), spine.Request{Source: strings.Repeat("#", 101)}); !errors.Is(err, spine.ErrTooLarge) {
		t.Fatalf("source: %v", err)
	}
	if _, err := r.Run(context.Background(), spine.Request{Source: "1", Inputs: map[string]string{"k": strings.Repeat("v", 60)}}); !errors.Is(err, spine.ErrTooLarge) {
		t.Fatalf("inputs: %v", err)
	}
	_, err := r.Run(context.Background(), spine.Request{Source: `"x" * 100`})
	if pe := spinetest.PythonError(t, err); !strings.Contains(pe.Message, "limit") {
		t.Fatalf("result: %#v", pe)
	}
	for _, in := range []any{[]int{1}, json.RawMessage(`{"a":`), make(chan int), json.RawMessage(`"s"`)} {
		if _, err := r.Run(context.Background(), spine.Request{Source: "1", Inputs: in}); !errors.Is(err, spine.ErrBadRequest) {
			t.Fatalf("inputs %v: err = %v, want ErrBadRequest", in, err)
		}
	}
	out := spinetest.MustRun(t, r, spine.Request{Source: `inputs["k"]`, Inputs: json.RawMessage(` {"k": [1]} `)})
	if string(out.Value) != "[1]" {
		t.Fatalf("value %s", out.Value)
	}
}

func TestGuestTraps(t *testing.T) {
	r := shared(t)
	// os._exit ends the Guest: the program's doing, so a Python error
	// (SystemExit), and the Runner goes on with another Guest.
	_, err := r.Run(context.Background(), spine.Request{Source: "import os\nos._exit(7)"})
	if pe := spinetest.PythonError(t, err); pe.Type != "SystemExit" || !strings.Contains(pe.Message, "os._exit(7)") {
		t.Fatalf("os._exit: %#v", pe)
	}
	// C recursion past the Guest's stack, once the program raised the
	// recursion limit: a trap, reported as the program's RecursionError, not
	// a crash of the Host.
	_, err = r.Run(context.Background(), spine.Request{Source: "import sys, json\nsys.setrecursionlimit(10**7)\nx = []\nfor _ in range(5 * 10**5):\n    x = [x]\njson.dumps(x)"})
	if pe := spinetest.PythonError(t, err); pe.Type != "RecursionError" || !strings.Contains(pe.Message, "stack") {
		t.Fatalf("deep C recursion: %#v", pe)
	}
	TestGuestSeedDemo(t)
}

func TestGuestInputDepth(t *testing.T) {
	r := shared(t)
	nested := func(depth int) json.RawMessage { // the inputs object is level 1
		return json.RawMessage(`{"a":` + strings.Repeat(`[{"b":`, (depth-1)/2) + strings.Repeat("[", (depth-1)%2) + "1" +
			strings.Repeat("]", (depth-1)%2) + strings.Repeat("}]", (depth-1)/2) + "}")
	}
	// The deepest inputs the Host accepts, the Guest decodes (and counts: the
	// test's inputs nest exactly that deep).
	out := spinetest.MustRun(t, r, spine.Request{Source: "x = inputs['a']\nn = 1\nwhile not isinstance(x, int):\n    x = x[0] if isinstance(x, list) else x['b']\n    n += 1\nresult = n", Inputs: nested(spine.MaxInputDepth)})
	if string(out.Value) != fmt.Sprint(spine.MaxInputDepth) {
		t.Fatalf("depth %s, want %d", out.Value, spine.MaxInputDepth)
	}
	// One level more is refused before the run, naming the limit.
	_, err := r.Run(context.Background(), spine.Request{Source: "1", Inputs: nested(spine.MaxInputDepth + 1)})
	if !errors.Is(err, spine.ErrBadRequest) || !strings.Contains(err.Error(), fmt.Sprint(spine.MaxInputDepth)) {
		t.Fatalf("too deep: %v", err)
	}
	// Brackets inside strings do not count.
	spinetest.MustRun(t, r, spine.Request{Source: "1", Inputs: json.RawMessage(`{"s": "` + strings.Repeat(`[{\"`, 2000) + `"}`)})
}

func TestGuestConcurrentRuns(t *testing.T) {
	r := shared(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out, err := r.Run(context.Background(), spine.Request{Source: `lookup(key="book") * inputs["n"]`, Inputs: map[string]int{"n": i}})
			if err != nil {
				errs <- err
				return
			}
			if string(out.Value) != fmt.Sprint(21*i) {
				errs <- fmt.Errorf("run %d: value %s", i, out.Value)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestGuestHelp(t *testing.T) {
	out := spinetest.MustRun(t, shared(t), spine.Request{Source: `help(lookup)
result = lookup.__doc__`})
	// The doc is the tool's stub's docstring (stubs.go): its description.
	if string(out.Value) != `"`+spinetest.LookupDescription+`"` || !strings.Contains(out.Stdout, spinetest.LookupDescription) {
		t.Fatalf("value %s stdout %q", out.Value, out.Stdout)
	}
	// help's header shows the stub's signature, not the proxy's (*args, **kwargs).
	if !strings.Contains(out.Stdout, "lookup(key: str) -> Any\n") || strings.Contains(out.Stdout, "*args") {
		t.Fatalf("help header: %q", out.Stdout)
	}
	out = spinetest.MustRun(t, shared(t), spine.Request{Source: `import inspect
result = str(inspect.signature(market.get_price))`})
	if string(out.Value) != `"(**kwargs) -> Any"` {
		t.Fatalf("signature %s", out.Value)
	}
}

func TestRunnerClose(t *testing.T) {
	started := make(chan struct{})
	m := suiteManifest()
	m["started"] = spine.ToolSpec{Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		close(started)
		return nil, nil
	}}
	r := spinetest.NewRunner(t, m, nil)
	before := runtime.NumGoroutine()
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), spine.Request{Source: "started()\nwhile True: pass"})
		done <- err
	}()
	<-started // the run is in flight: Close must stop it
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, spine.ErrClosed) {
		t.Fatalf("run in flight: err = %v, want ErrClosed", err)
	}
	if _, err := r.Run(context.Background(), spine.Request{Source: "1"}); !errors.Is(err, spine.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Logf("goroutines %d -> %d", before, after)
	}
}

func TestNewRejectsBadManifests(t *testing.T) {
	ok := func(context.Context, json.RawMessage) (any, error) { return nil, nil }
	for name, m := range map[string]spine.Manifest{
		"empty name":     {"": {Call: ok}},
		"not identifier": {"get-price": {Call: ok}},
		"keyword":        {"market.class": {Call: ok}},
		"builtin":        {"print": {Call: ok}},
		"reserved":       {"inputs": {Call: ok}},
		"dunder":         {"__spine": {Call: ok}},
		"nil call":       {"lookup": {}},
		"tool and ns":    {"market": {Call: ok}, "market.price": {Call: ok}},
		"empty segment":  {"market..price": {Call: ok}},
		"unicode":        {"prix_é": {Call: ok}},
	} {
		if _, err := spine.New(context.Background(), m, nil); err == nil {
			t.Errorf("%s: New accepted %v", name, m)
		}
	}
	if _, err := spine.New(context.Background(), nil, &spine.Options{MemoryLimit: 1 << 40}); err == nil {
		t.Error("New accepted a 1 TiB memory limit")
	}
	if _, err := spine.New(context.Background(), nil, &spine.Options{Artifact: &spine.Artifact{Wasm: []byte("not wasm")}}); !errors.Is(err, spine.ErrArtifact) {
		t.Errorf("bad artifact: %v", err)
	}
}

func TestNewCopiesManifest(t *testing.T) {
	m := spine.Manifest{"lookup": spinetest.NewTools().Manifest()["lookup"]}
	r := spinetest.NewRunner(t, m, nil)
	m["lookup"] = spine.ToolSpec{Call: func(context.Context, json.RawMessage) (any, error) { return 0, nil }}
	out := spinetest.MustRun(t, r, spine.Request{Source: `lookup(key="book")`})
	if string(out.Value) != "21" {
		t.Fatalf("value %s: the Runner saw a change to the caller's manifest", out.Value)
	}
}

// TestClassify: each way Run ends, from a real run, has its one Outcome.
func TestClassify(t *testing.T) {
	r := spinetest.NewRunner(t, suiteManifest(), &spine.Options{MaxSource: 1 << 10})
	ctx := context.Background()
	cases := []struct {
		req  spine.Request
		want spine.Outcome
	}{
		{spine.Request{Source: "1"}, spine.OutcomeOK},
		{spine.Request{Source: "1/0"}, spine.OutcomePython},
		{spine.Request{Source: "import os; os._exit(2)"}, spine.OutcomePython},
		{spine.Request{Source: "1", Inputs: json.RawMessage(`[1]`)}, spine.OutcomeBadRequest},
		{spine.Request{Source: "1", Stream: strings.NewReader("1")}, spine.OutcomeBadRequest},
		{spine.Request{Source: strings.Repeat("#", 2<<10)}, spine.OutcomeTooLarge},
		{spine.Request{Source: "while True: pass", Timeout: time.Millisecond}, spine.OutcomeTimeout},
	}
	for _, c := range cases {
		_, err := r.Run(ctx, c.req)
		if got := spine.Classify(err); got != c.want {
			t.Errorf("%.30q: Classify(%v) = %s, want %s", c.req.Source, err, got, c.want)
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Run(canceled, spine.Request{Source: "1"}); spine.Classify(err) != spine.OutcomeCanceled {
		t.Errorf("canceled: %v is %s", err, spine.Classify(err))
	}
	r.Close(ctx)
	if _, err := r.Run(ctx, spine.Request{Source: "1"}); spine.Classify(err) != spine.OutcomeClosed {
		t.Errorf("closed: %v is %s", err, spine.Classify(err))
	}
	if got := spine.Classify(fmt.Errorf("%w: a trap", spine.ErrGuest)); got != spine.OutcomeGuest {
		t.Errorf("ErrGuest is %s", got)
	}
}

// TestRunnerManifest: Manifest returns the tools the Runner was made with,
// as a copy: a tool added to it or taken out is no tool of the Runner's.
func TestRunnerManifest(t *testing.T) {
	r := shared(t)
	m := r.Manifest()
	want := suiteManifest()
	if len(m) != len(want) {
		t.Fatalf("%d tools, want %d", len(m), len(want))
	}
	for name := range want {
		if m[name].Call == nil {
			t.Errorf("tool %q missing", name)
		}
	}
	delete(m, "lookup")
	m["added"] = spine.ToolSpec{Call: func(context.Context, json.RawMessage) (any, error) { return 1, nil }}
	if again := r.Manifest(); again["lookup"].Call == nil || again["added"].Call != nil {
		t.Fatalf("the Runner's manifest changed with the copy: %v", slices.Sorted(maps.Keys(again)))
	}
	if _, err := r.Run(context.Background(), spine.Request{Source: "added()"}); err == nil {
		t.Fatal("a tool added to the copy ran")
	}
}
