package spine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The tests in this file run programs in the real Guest: the embedded CPython
// artifact under wazero, through Runner.Run.

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

func testManifest() Manifest {
	return Manifest{
		"lookup":  {Call: lookupTool, AllowEarlyRead: true, Description: "Look up a price by key."},
		"echo":    {Call: func(ctx context.Context, args json.RawMessage) (any, error) { return args, nil }},
		"fail":    {Call: func(ctx context.Context, args json.RawMessage) (any, error) { return nil, errors.New("boom") }},
		"nothing": {Call: func(ctx context.Context, args json.RawMessage) (any, error) { return nil, nil }},
		"unencodable": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			return make(chan int), nil
		}},
		"explode": {Call: func(ctx context.Context, args json.RawMessage) (any, error) { panic("kaboom") }},
		"huge": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			return strings.Repeat("x", 2<<20), nil
		}},
		"wait": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}},
		"market.get_price": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			var a struct {
				Symbol string `json:"symbol"`
			}
			json.Unmarshal(args, &a)
			return map[string]any{"symbol": a.Symbol, "price": 100 + len(a.Symbol)}, nil
		}},
	}
}

// testOptions keep tests quick: compiled code is cached on disk beside the
// user's cache as usual.
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

func mustRun(t testing.TB, r *Runner, src string, inputs any) *Output {
	t.Helper()
	out, err := run(t, r, src, inputs)
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

func TestGuestSeedDemo(t *testing.T) {
	out := mustRun(t, shared(t), `price = lookup(key="book")
result = price * inputs["quantity"]
`, map[string]any{"quantity": 3})
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
			out := mustRun(t, r, tc.src, nil)
			if string(out.Value) != tc.want {
				t.Fatalf("value = %s, want %s", out.Value, tc.want)
			}
		})
	}
}

func TestGuestToolErrors(t *testing.T) {
	r := shared(t)
	t.Run("caught", func(t *testing.T) {
		out := mustRun(t, r, `try:
    lookup(key="nope")
except RuntimeError as e:
    result = str(e)
`, nil)
		if string(out.Value) != `"no such key: nope"` {
			t.Fatalf("value = %s", out.Value)
		}
	})
	t.Run("uncaught", func(t *testing.T) {
		_, err := run(t, r, "x = 1\nfail()\n", nil)
		pe := pythonError(t, err)
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
		out := mustRun(t, r, `try:
    explode()
except RuntimeError as e:
    result = str(e)
`, nil)
		if !strings.Contains(string(out.Value), "tool panicked: kaboom") {
			t.Fatalf("value = %s", out.Value)
		}
	})
	t.Run("tool result not JSON", func(t *testing.T) {
		_, err := run(t, r, "unencodable()", nil)
		pe := pythonError(t, err)
		if pe.Type != "RuntimeError" || !strings.HasPrefix(pe.Message, "tool result is not JSON") {
			t.Fatalf("got %#v", pe)
		}
	})
	t.Run("response over 1 MiB", func(t *testing.T) {
		_, err := run(t, r, "huge()", nil)
		pe := pythonError(t, err)
		if pe.Type != "RuntimeError" || !strings.Contains(pe.Message, "1 MiB") {
			t.Fatalf("got %#v", pe)
		}
	})
	t.Run("positional arguments", func(t *testing.T) {
		_, err := run(t, r, `lookup("book")`, nil)
		pe := pythonError(t, err)
		if pe.Type != "TypeError" || !strings.Contains(pe.Message, "lookup() takes keyword arguments only") {
			t.Fatalf("got %#v", pe)
		}
	})
	t.Run("arguments not JSON", func(t *testing.T) {
		_, err := run(t, r, `echo(x={1, 2})`, nil)
		pe := pythonError(t, err)
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
			out := mustRun(t, r, tc.src, nil)
			if string(out.Value) != tc.want {
				t.Fatalf("value = %s, want %s", out.Value, tc.want)
			}
		})
	}
}

func TestGuestEarlyReadsThroughRawBridge(t *testing.T) {
	var calls atomic.Int32
	r := newRunner(t, Manifest{"lookup": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		calls.Add(1)
		return lookupTool(ctx, args)
	}, AllowEarlyRead: true}}, nil)
	src := `import _spine, bootstrap
req = b'{"tool":"lookup","args":{"key":"book"}}'
h = _spine.prepare(req)
assert h != 0, h
result = [bootstrap.decode(_spine.resolve(h, req)), bootstrap.decode(_spine.resolve(h, req))]
`
	out, err := r.Run(context.Background(), Request{Source: src, EarlyReads: true})
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
		{"result not JSON", "result = {1, 2}", "TypeError", "set"},
		{"result NaN", "result = float('nan')", "TypeError", "Out of range float"},
		{"deep recursion", "def f(n):\n    return f(n + 1)\nf(0)", "RecursionError", "maximum recursion depth"},
		{"exit code", "exit(3)", "SystemExit", "3"},
		{"input", "input()", "EOFError", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, r, tc.src, nil)
			pe := pythonError(t, err)
			if pe.Type != tc.typ || !strings.Contains(pe.Message, tc.msg) {
				t.Fatalf("got %#v", pe)
			}
		})
	}
	t.Run("traceback through functions", func(t *testing.T) {
		_, err := r.Run(context.Background(), Request{Source: "def f():\n    return 1 / 0\n\nf()\n", Filename: "job.py"})
		pe := pythonError(t, err)
		want := "Traceback (most recent call last):\n  File \"job.py\", line 4, in <module>\n    f()\n  File \"job.py\", line 2, in f\n    return 1 / 0\n"
		if !strings.HasPrefix(pe.Traceback, want) || pe.Line != 2 || pe.Type != "ZeroDivisionError" {
			t.Fatalf("got %#v", pe)
		}
	})
}

func TestGuestOutputCapture(t *testing.T) {
	out := mustRun(t, shared(t), `import sys, os
print("hello")
print("to stderr", file=sys.stderr)
sys.stdout.write("raw\n")
os.write(1, b"fd\n")
`, nil)
	if out.Stdout != "hello\nraw\nfd\n" || out.Stderr != "to stderr\n" || out.StdoutTruncated || out.StderrTruncated {
		t.Fatalf("stdout %q stderr %q", out.Stdout, out.Stderr)
	}

	small := newRunner(t, testManifest(), &Options{MaxOutput: 10})
	out = mustRun(t, small, `import sys
print("0123456789abcdef")
print("é" * 20, file=sys.stderr)
result = "done"`, nil)
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
	clean := mustRun(t, r, probe, nil)
	mustRun(t, r, `import builtins, json, sys
secret = 42
builtins.leaked = "yes"
json.leaked = "yes"
sys.modules["planted"] = json
sys.setrecursionlimit(50)
`, nil)
	out := mustRun(t, r, probe, nil)
	if !strings.HasPrefix(string(clean.Value), "[false,false,false,false,") || string(out.Value) != string(clean.Value) {
		t.Fatalf("state leaked between runs: %s, clean %s", out.Value, clean.Value)
	}
}

func TestGuestSandbox(t *testing.T) {
	r := shared(t)
	for _, tc := range []struct{ name, src, want string }{
		{"host files", `open("/etc/passwd")`, "FileNotFoundError"},
		{"no links out", `import os; os.symlink("/etc/passwd", "passwd")`, "PermissionError"},
		{"stdlib is read-only", `open("/usr/local/lib/python311.zip", "wb")`, "OSError"},
		{"environment", `import os; os.environ["HOME"]`, "KeyError"},
		{"sockets", `import socket; socket.socket().connect(("127.0.0.1", 80))`, "OSError"},
		{"subprocess", `import subprocess; subprocess.run(["ls"])`, "OSError"},
		{"os.system", `import os; os.system("ls")`, "AttributeError"},
		{"threads", `import _thread; _thread.start_new_thread(print, ())`, "RuntimeError"}, // threading.Thread: TestPythonThreads
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, r, tc.src, nil)
			pe := pythonError(t, err)
			if pe.Type != tc.want && !(tc.want == "OSError" && strings.HasSuffix(pe.Type, "Error")) {
				t.Fatalf("got %#v, want %s", pe, tc.want)
			}
		})
	}
	out := mustRun(t, r, `import os, sys
result = [dict(os.environ), sys.argv, os.getcwd()]`, nil)
	if !strings.HasPrefix(string(out.Value), `[{},`) {
		t.Fatalf("the Guest sees an environment: %s", out.Value)
	}
	// "/" is the run's scratch tree, nothing of the Host's.
	if out := mustRun(t, r, `import os; result = sorted(os.listdir("/"))`, nil); string(out.Value) != `["tmp","work"]` {
		t.Fatalf(`the Guest's "/" holds %s`, out.Value)
	}
}

func TestGuestTimeout(t *testing.T) {
	r := shared(t)
	for _, src := range []string{"while True: pass", "import time\ntime.sleep(3600)", "wait()"} {
		t.Run(src, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := r.Run(ctx, Request{Source: src})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want DeadlineExceeded", err)
			}
		})
	}
	t.Run("Request.Timeout", func(t *testing.T) {
		_, err := r.Run(context.Background(), Request{Source: "while True: pass", Timeout: 100 * time.Millisecond})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := r.Run(ctx, Request{Source: "while True: pass"})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	})
	// The Runner keeps working.
	TestGuestSeedDemo(t)
}

func TestGuestSleepWorks(t *testing.T) {
	out := mustRun(t, shared(t), `import time
t = time.monotonic()
time.sleep(0.01)
result = time.monotonic() - t >= 0.01`, nil)
	if string(out.Value) != "true" {
		t.Fatalf("value %s", out.Value)
	}
}

func TestGuestMemoryBomb(t *testing.T) {
	r := newRunner(t, testManifest(), &Options{MemoryLimit: 96 << 20})
	for _, src := range []string{
		`x = bytearray(200 * 1024 * 1024)`,
		`x = [0] * (10**9)`,
		"chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))",
	} {
		t.Run(src, func(t *testing.T) {
			_, err := run(t, r, src, nil)
			var pe *PythonError
			if errors.As(err, &pe) {
				if pe.Type != "MemoryError" {
					t.Fatalf("got %#v", pe)
				}
			} else if !errors.Is(err, ErrGuest) {
				t.Fatalf("err = %v, want MemoryError or ErrGuest", err)
			}
		})
	}
	mustRun(t, r, `x = bytearray(8 * 1024 * 1024)`, nil)
}

func TestGuestToolBudget(t *testing.T) {
	r := newRunner(t, testManifest(), &Options{MaxToolCalls: 3})
	out := mustRun(t, r, `n = 0
try:
    while True:
        lookup(key="book")
        n += 1
except RuntimeError as e:
    result = [n, str(e)]`, nil)
	if string(out.Value) != `[3,"tool call budget exhausted"]` {
		t.Fatalf("value %s", out.Value)
	}
}

func TestGuestLimits(t *testing.T) {
	r := newRunner(t, testManifest(), &Options{MaxSource: 100, MaxInputs: 50, MaxResult: 20})
	if _, err := run(t, r, strings.Repeat("#", 101), nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("source: %v", err)
	}
	if _, err := run(t, r, "1", map[string]string{"k": strings.Repeat("v", 60)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("inputs: %v", err)
	}
	_, err := run(t, r, `"x" * 100`, nil)
	if pe := pythonError(t, err); !strings.Contains(pe.Message, "limit") {
		t.Fatalf("result: %#v", pe)
	}
	for _, in := range []any{[]int{1}, json.RawMessage(`{"a":`), make(chan int), json.RawMessage(`"s"`)} {
		if _, err := run(t, r, "1", in); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("inputs %v: err = %v, want ErrBadRequest", in, err)
		}
	}
	out := mustRun(t, r, `inputs["k"]`, json.RawMessage(` {"k": [1]} `))
	if string(out.Value) != "[1]" {
		t.Fatalf("value %s", out.Value)
	}
}

func TestGuestTraps(t *testing.T) {
	r := shared(t)
	// os._exit ends the Guest: the program's doing, so a Python error
	// (SystemExit), and the Runner goes on with another Guest.
	_, err := run(t, r, "import os\nos._exit(7)", nil)
	if pe := pythonError(t, err); pe.Type != "SystemExit" || !strings.Contains(pe.Message, "os._exit(7)") {
		t.Fatalf("os._exit: %#v", pe)
	}
	// C recursion past the Guest's stack, once the program raised the
	// recursion limit: a trap, reported as the program's RecursionError, not
	// a crash of the Host.
	_, err = run(t, r, "import sys, json\nsys.setrecursionlimit(10**7)\nx = []\nfor _ in range(5 * 10**5):\n    x = [x]\njson.dumps(x)", nil)
	if pe := pythonError(t, err); pe.Type != "RecursionError" || !strings.Contains(pe.Message, "stack") {
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
	if depth := jsonDepth(nested(MaxInputDepth), 1<<20); depth != MaxInputDepth {
		t.Fatalf("the test's inputs nest %d levels, want %d", depth, MaxInputDepth)
	}
	// The deepest inputs the Host accepts, the Guest decodes.
	out := mustRun(t, r, "x = inputs['a']\nn = 1\nwhile not isinstance(x, int):\n    x = x[0] if isinstance(x, list) else x['b']\n    n += 1\nresult = n", nested(MaxInputDepth))
	if string(out.Value) != fmt.Sprint(MaxInputDepth) {
		t.Fatalf("depth %s, want %d", out.Value, MaxInputDepth)
	}
	// One level more is refused before the run, naming the limit.
	_, err := run(t, r, "1", nested(MaxInputDepth+1))
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), fmt.Sprint(MaxInputDepth)) {
		t.Fatalf("too deep: %v", err)
	}
	// Brackets inside strings do not count.
	mustRun(t, r, "1", json.RawMessage(`{"s": "`+strings.Repeat(`[{\"`, 2000)+`"}`))
}

func TestGuestConcurrentRuns(t *testing.T) {
	r := shared(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out, err := r.Run(context.Background(), Request{Source: `lookup(key="book") * inputs["n"]`, Inputs: map[string]int{"n": i}})
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
	out := mustRun(t, shared(t), `help(lookup)
result = lookup.__doc__`, nil)
	// The doc is the tool's stub's docstring (stubs.go): its description.
	if string(out.Value) != `"Look up a price by key."` || !strings.Contains(out.Stdout, "Look up a price by key.") {
		t.Fatalf("value %s stdout %q", out.Value, out.Stdout)
	}
	// help's header shows the stub's signature, not the proxy's (*args, **kwargs).
	if !strings.Contains(out.Stdout, "lookup(**kwargs) -> Any\n") || strings.Contains(out.Stdout, "*args") {
		t.Fatalf("help header: %q", out.Stdout)
	}
	out = mustRun(t, shared(t), `import inspect
result = str(inspect.signature(market.get_price))`, nil)
	if string(out.Value) != `"(**kwargs) -> Any"` {
		t.Fatalf("signature %s", out.Value)
	}
}

func TestRunnerClose(t *testing.T) {
	started := make(chan struct{})
	m := testManifest()
	m["started"] = ToolSpec{Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		close(started)
		return nil, nil
	}}
	r := newRunner(t, m, nil)
	before := runtime.NumGoroutine()
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), Request{Source: "started()\nwhile True: pass"})
		done <- err
	}()
	<-started // the run is in flight: Close must stop it
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("run in flight: err = %v, want ErrClosed", err)
	}
	if _, err := run(t, r, "1", nil); !errors.Is(err, ErrClosed) {
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
	for name, m := range map[string]Manifest{
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
		if _, err := New(context.Background(), m, nil); err == nil {
			t.Errorf("%s: New accepted %v", name, m)
		}
	}
	if _, err := New(context.Background(), nil, &Options{MemoryLimit: 1 << 40}); err == nil {
		t.Error("New accepted a 1 TiB memory limit")
	}
	if _, err := New(context.Background(), nil, &Options{Artifact: &Artifact{Wasm: []byte("not wasm")}}); !errors.Is(err, ErrArtifact) {
		t.Errorf("bad artifact: %v", err)
	}
}

func TestNewCopiesManifest(t *testing.T) {
	m := Manifest{"lookup": {Call: lookupTool}}
	r := newRunner(t, m, nil)
	m["lookup"] = ToolSpec{Call: func(context.Context, json.RawMessage) (any, error) { return 0, nil }}
	out := mustRun(t, r, `lookup(key="book")`, nil)
	if string(out.Value) != "21" {
		t.Fatalf("value %s: the Runner saw a change to the caller's manifest", out.Value)
	}
}

// TestClassify: each way Run ends, from a real run, has its one Outcome.
func TestClassify(t *testing.T) {
	r := newRunner(t, testManifest(), &Options{MaxSource: 1 << 10})
	ctx := context.Background()
	cases := []struct {
		req  Request
		want Outcome
	}{
		{Request{Source: "1"}, OutcomeOK},
		{Request{Source: "1/0"}, OutcomePython},
		{Request{Source: "import os; os._exit(2)"}, OutcomePython},
		{Request{Source: "1", Inputs: json.RawMessage(`[1]`)}, OutcomeBadRequest},
		{Request{Source: "1", Stream: strings.NewReader("1")}, OutcomeBadRequest},
		{Request{Source: strings.Repeat("#", 2<<10)}, OutcomeTooLarge},
		{Request{Source: "while True: pass", Timeout: time.Millisecond}, OutcomeTimeout},
	}
	for _, c := range cases {
		_, err := r.Run(ctx, c.req)
		if got := Classify(err); got != c.want {
			t.Errorf("%.30q: Classify(%v) = %s, want %s", c.req.Source, err, got, c.want)
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Run(canceled, Request{Source: "1"}); Classify(err) != OutcomeCanceled {
		t.Errorf("canceled: %v is %s", err, Classify(err))
	}
	r.Close(ctx)
	if _, err := r.Run(ctx, Request{Source: "1"}); Classify(err) != OutcomeClosed {
		t.Errorf("closed: %v is %s", err, Classify(err))
	}
	if got := Classify(fmt.Errorf("%w: a trap", ErrGuest)); got != OutcomeGuest {
		t.Errorf("ErrGuest is %s", got)
	}
}
