package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The tests in this file check the program's world in the real Guest
// (docs/python.md): the program as __main__, asyncio, executors, threads and
// the network.

// TestPythonMain: the program runs as the module __main__, as a script does
// natively, so pickle, typing and dataclasses find what it defines.
func TestPythonMain(t *testing.T) {
	r := shared(t)
	for _, tc := range []struct{ name, filename, src, want string }{
		{"name and file", "prog.py", `result = [__name__, __file__]`, `["__main__","prog.py"]`},
		{"default file", "", `result = __file__`, `"<agent>"`},
		{"module attributes", "prog.py", `result = list(globals())[:9] + [__package__, __spec__, __cached__, __doc__]`,
			`["__name__","__doc__","__package__","__loader__","__spec__","__annotations__","__builtins__","__file__","__cached__",null,null,null,null]`},
		{"docstring", "", "\"\"\"What the program does.\"\"\"\nresult = __doc__", `"What the program does."`},
		{"sys.modules", "", `import sys
m = sys.modules["__main__"]
x = 5
result = [m.__dict__ is globals(), m.x, type(m).__name__]`, `[true,5,"module"]`},
		{"pickle a class of the program", "", `import pickle
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y
def norm(p):
    return p.x + p.y
p = pickle.loads(pickle.dumps(Point(2, 3)))
f = pickle.loads(pickle.dumps(norm))
result = [type(p).__module__, f(p), f is norm]`, `["__main__",5,true]`},
		{"type hints with a forward reference", "", `import typing
class Tree:
    children: "list[Tree]"
    label: "Label"
class Label:
    pass
hints = typing.get_type_hints(Tree)
result = [hints["children"] == list[Tree], hints["label"] is Label]`, `[true,true]`},
		{"dataclass ClassVar under future annotations", "", `from __future__ import annotations
import dataclasses
import typing
@dataclasses.dataclass
class Config:
    name: str
    count: typing.ClassVar[int] = 0
result = [f.name for f in dataclasses.fields(Config)]`, `["name"]`},
		{"functions and classes", "", `def f(): pass
class C: pass
result = [f.__module__, C.__module__, repr(C)]`, `["__main__","__main__","<class '__main__.C'>"]`},
		{"stdlib modules have __file__", "", `import os, codecs, abc, io, json, stat, posixpath
result = [m.__file__ for m in (os, codecs, abc, json)] + [all(m.__file__.startswith("/usr/local/lib/python311.zip/") for m in (io, stat, posixpath))]`,
			`["/usr/local/lib/python311.zip/os.pyc","/usr/local/lib/python311.zip/codecs.pyc","/usr/local/lib/python311.zip/abc.pyc","/usr/local/lib/python311.zip/json/__init__.pyc",true]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := r.Run(context.Background(), spine.Request{Source: tc.src, Filename: tc.filename})
			if err != nil {
				t.Fatalf("%v\n%s", err, spinetest.PythonError(t, err).Traceback)
			}
			if string(out.Value) != tc.want {
				t.Fatalf("value %s, want %s", out.Value, tc.want)
			}
		})
	}

	// A traceback still points into the program, by its file name.
	_, err := r.Run(context.Background(), spine.Request{Source: "def f():\n    raise ValueError('no')\nf()\n", Filename: "prog.py"})
	pe := spinetest.PythonError(t, err)
	if pe.Line != 2 || !strings.Contains(pe.Traceback, `File "prog.py", line 3`) || strings.Contains(pe.Traceback, "bootstrap") {
		t.Fatalf("traceback: line %d\n%s", pe.Line, pe.Traceback)
	}

	// The next run has its own __main__.
	spinetest.MustRun(t, r, spine.Request{Source: "leaked = 1"})
	if out := spinetest.MustRun(t, r, spine.Request{Source: `import sys
result = [hasattr(sys.modules["__main__"], "leaked"), "leaked" in globals()]`}); string(out.Value) != `[false,false]` {
		t.Fatalf("a run saw the last one's __main__: %s", out.Value)
	}
}

// TestPythonMainSession: a session's runs share one __main__.
func TestPythonMainSession(t *testing.T) {
	s := spinetest.NewSession(t, shared(t))
	spinetest.Step(t, s, "import pickle\nclass Box:\n    def __init__(self, v): self.v = v\nsaved = pickle.dumps(Box(7))\nresult = 0")
	if got := spinetest.Step(t, s, `import sys
result = [pickle.loads(saved).v, sys.modules["__main__"].Box is Box, __name__]`); got != `[7,true,"__main__"]` {
		t.Fatalf("second run: %s", got)
	}
}

// TestPythonAsyncio: asyncio runs without a socket pair; its sleeps are the
// Host's, and a loop that could only wait forever fails at once.
func TestPythonAsyncio(t *testing.T) {
	r := shared(t)
	for _, tc := range []struct{ name, src, want string }{
		{"run and gather", `import asyncio
async def twice(x):
    await asyncio.sleep(0.001)
    return 2 * x
async def main():
    return await asyncio.gather(twice(1), twice(2), twice(3))
result = asyncio.run(main())`, `[2,4,6]`},
		// The timers are set at times fixed before any task starts (call_at),
		// so a machine that pauses the run between the tasks' starts cannot
		// reorder them; timers due together fire in the order of their times.
		{"tasks in order of their timers", `import asyncio
order = []
async def note(name, when):
    loop = asyncio.get_running_loop()
    due = loop.create_future()
    loop.call_at(when, due.set_result, None)
    await due
    await asyncio.sleep(0)
    order.append(name)
async def main():
    base = asyncio.get_running_loop().time()
    tasks = [asyncio.create_task(note(n, base + d)) for n, d in (("c", 0.03), ("a", 0.01), ("b", 0.02))]
    await asyncio.wait(tasks)
asyncio.run(main())
result = order`, `["a","b","c"]`},
		{"wait_for and timeout", `import asyncio
async def main():
    out = []
    try:
        await asyncio.wait_for(asyncio.sleep(10), timeout=0.01)
    except TimeoutError:
        out.append("wait_for")
    try:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(10)
    except TimeoutError:
        out.append("timeout")
    out.append(await asyncio.wait_for(asyncio.sleep(0, "quick"), timeout=5))
    return out
result = asyncio.run(main())`, `["wait_for","timeout","quick"]`},
		{"queue", `import asyncio
async def producer(q):
    for i in range(5):
        await q.put(i)
        await asyncio.sleep(0)
    await q.put(None)
async def consumer(q):
    got = []
    while (item := await q.get()) is not None:
        got.append(item)
    return got
async def main():
    q = asyncio.Queue(maxsize=2)
    _, got = await asyncio.gather(producer(q), consumer(q))
    return got
result = asyncio.run(main())`, `[0,1,2,3,4]`},
		{"to_thread and run_in_executor", `import asyncio, functools
def add(a, b=0):
    return a + b
async def main():
    loop = asyncio.get_running_loop()
    x = await asyncio.to_thread(add, 1, b=2)
    y = await loop.run_in_executor(None, add, 10)
    z = await loop.run_in_executor(None, functools.partial(add, 5, b=5))
    try:
        await asyncio.to_thread(add, "a", 1)
    except TypeError as e:
        err = type(e).__name__
    return [x, y, z, err, lookup(key="book")]
result = asyncio.run(main())`, `[3,10,10,"TypeError",21]`},
		{"new_event_loop", `import asyncio
loop = asyncio.new_event_loop()
try:
    result = [loop.run_until_complete(asyncio.sleep(0, 7)), type(loop).__name__, isinstance(loop, asyncio.AbstractEventLoop)]
finally:
    loop.close()`, `[7,"GuestEventLoop",true]`},
		{"a task's exception", `import asyncio
async def bad():
    raise KeyError("k")
async def main():
    return await asyncio.gather(bad(), asyncio.sleep(0, 1), return_exceptions=True)
result = [repr(x) for x in asyncio.run(main())]`, `["KeyError('k')","1"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := spinetest.MustRun(t, r, spine.Request{Source: tc.src})
			if string(out.Value) != tc.want {
				t.Fatalf("value %s, want %s", out.Value, tc.want)
			}
		})
	}

	t.Run("nothing to wait for", func(t *testing.T) {
		_, err := r.Run(context.Background(), spine.Request{Source: `import asyncio
async def main():
    await asyncio.get_running_loop().create_future()
asyncio.run(main())`})
		pe := spinetest.PythonError(t, err)
		if pe.Type != "RuntimeError" || !strings.Contains(pe.Message, "nothing to run and nothing to wait for") || pe.Line != 4 {
			t.Fatalf("got %s: %s (line %d)", pe.Type, pe.Message, pe.Line)
		}
	})

	t.Run("sleep ends with the run", func(t *testing.T) {
		// The run's time limit stops an hour's sleep; the generous test time-out
		// only guards against a sleep that does not stop.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := r.Run(ctx, spine.Request{Source: "import asyncio\nasyncio.run(asyncio.sleep(3600))", Timeout: 200 * time.Millisecond})
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			t.Fatalf("got %v", err)
		}
		spinetest.MustRun(t, r, spine.Request{Source: "1"}) // the Runner goes on
	})
}

// barrier is a tool whose calls each wait until n calls have started: with
// n > 1 a program ends only if its calls run at the same time. It counts the
// calls in flight at once; n = 1 lets every call through.
type barrier struct {
	n       int
	mu      sync.Mutex
	started int
	running int
	peak    int
	arrived chan struct{} // closed when n calls have started
}

func newBarrier(n int) *barrier { return &barrier{n: n, arrived: make(chan struct{})} }

func (b *barrier) call(ctx context.Context, args json.RawMessage) (any, error) {
	var a struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.started++
	b.running++
	b.peak = max(b.peak, b.running)
	if b.started == b.n {
		close(b.arrived)
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.running--
		b.mu.Unlock()
	}()
	select {
	case <-b.arrived:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if a.Key == "bad" {
		return nil, errors.New("no such key: bad")
	}
	return "v:" + a.Key, nil
}

func (b *barrier) counts() (started, peak int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started, b.peak
}

func barrierRunner(t *testing.T, b *barrier, opts *spine.Options) *spine.Runner {
	return spinetest.NewRunner(t, spine.Manifest{
		"read":     {Call: b.call, AllowEarlyRead: true},
		"db.read":  {Call: b.call, AllowEarlyRead: true},
		"write":    {Call: func(ctx context.Context, args json.RawMessage) (any, error) { return "written", nil }},
		"identity": {Call: func(ctx context.Context, args json.RawMessage) (any, error) { return args, nil }, AllowEarlyRead: true},
	}, opts)
}

// concurrentPrograms each make four read calls through an executor idiom. With
// early reads on, the four run at the same time (the barrier lets them through
// only then); with them off, one after another.
var concurrentPrograms = []struct{ name, src string }{
	{"submit", `from concurrent.futures import ThreadPoolExecutor
print("start")
with ThreadPoolExecutor(max_workers=4) as ex:
    futures = [ex.submit(read, key=k) for k in ["a", "b", "c", "d"]]
    print("submitted", all(f.done() for f in futures))
result = [f.result() for f in futures]
print("end")`},
	{"as_completed and wait", `import concurrent.futures as cf
ex = cf.ThreadPoolExecutor()
fs = {ex.submit(db.read, key=k): k for k in "wxyz"}
done, not_done = cf.wait(fs)
result = [[fs[f], f.result()] for f in cf.as_completed(fs)] + [len(done), len(not_done)]
ex.shutdown()`},
	{"to_thread with gather", `import asyncio
async def main():
    return await asyncio.gather(*(asyncio.to_thread(read, key=k) for k in ["a", "b", "c", "d"]))
result = asyncio.run(main())`},
	{"run_in_executor and partial", `import asyncio, functools
async def fetch(loop, k):
    value = await loop.run_in_executor(None, functools.partial(read, key=k))
    print("got", k)
    return value
async def main():
    loop = asyncio.get_running_loop()
    return await asyncio.gather(*(fetch(loop, k) for k in "abcd"))
result = asyncio.run(main())`},
	{"errors, plain functions and other tools between", `from concurrent.futures import ThreadPoolExecutor
def shout(s):
    print("shout", s)
    return s.upper()
out = []
with ThreadPoolExecutor() as ex:
    fs = [ex.submit(read, key="a"), ex.submit(shout, "x"), ex.submit(read, key="bad"),
          ex.submit(read, key="c"), ex.submit(identity, n=1), ex.submit(read, key="d")]
    out.append(write(what="between"))
for f in fs:
    try:
        out.append(f.result())
    except RuntimeError as e:
        out.append("error: " + str(e))
result = out`},
	{"map with a lambda", `from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor() as ex:
    result = list(ex.map(lambda k: read(key=k), ["a", "b", "c", "d"]))`},
	{"map with a function that forwards to a namespaced tool", `from concurrent.futures import ThreadPoolExecutor
PREFIX = "k"
def get(k, n):
    return db.read(key=k, prefix=PREFIX, n=n)
with ThreadPoolExecutor() as ex:
    result = list(ex.map(get, "abcd", range(4)))`},
	{"run_in_executor with a closure", `import asyncio
async def fetch(k):
    return await asyncio.get_running_loop().run_in_executor(None, lambda: read(key=k))
async def main():
    return await asyncio.gather(*(fetch(k) for k in "abcd"))
result = asyncio.run(main())`},
	{"map over a partial's results", `from concurrent.futures import ThreadPoolExecutor
import functools
with ThreadPoolExecutor() as ex:
    fs = [ex.submit(functools.partial(read, key=k)) for k in "abcd"]
    lengths = list(ex.map(len, [f.result() for f in fs]))
result = [fs[0].result(), lengths]`},
}

// TestPythonExecutorsParallel: the calls of an early-read tool a program
// hands to an executor start on the Host at once, and the outcome is the one
// the same program has with early reads off: value, output, errors and tool
// calls.
func TestPythonExecutorsParallel(t *testing.T) {
	for _, tc := range concurrentPrograms {
		t.Run(tc.name, func(t *testing.T) {
			on := newBarrier(4)
			rOn := barrierRunner(t, on, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a safety net only
			defer cancel()
			outOn, errOn := rOn.Run(ctx, spine.Request{Source: tc.src, EarlyReads: true})
			if errOn != nil {
				t.Fatalf("early reads on: %v", errOn)
			}
			if _, peak := on.counts(); peak < 4 {
				t.Errorf("early reads on: at most %d reads at once, want 4", peak)
			}

			off := newBarrier(1)
			outOff, errOff := barrierRunner(t, off, nil).Run(context.Background(), spine.Request{Source: tc.src})
			if errOff != nil {
				t.Fatalf("early reads off: %v", errOff)
			}
			if _, peak := off.counts(); peak != 1 {
				t.Errorf("early reads off: %d reads at once, want 1", peak)
			}
			if a, b := fmt.Sprintf("%s|%q|%q|%d", outOn.Value, outOn.Stdout, outOn.Stderr, outOn.ToolCalls),
				fmt.Sprintf("%s|%q|%q|%d", outOff.Value, outOff.Stdout, outOff.Stderr, outOff.ToolCalls); a != b {
				t.Errorf("outcomes differ:\n on: %s\noff: %s", a, b)
			}
			startedOn, _ := on.counts()
			startedOff, _ := off.counts()
			if startedOn != startedOff {
				t.Errorf("%d reads started with early reads on, %d off", startedOn, startedOff)
			}
			t.Logf("value %s, %d tool calls", outOn.Value, outOn.ToolCalls)
		})
	}
}

// TestPythonExecutorsForwarderRunsNoCode: to learn what a lambda handed to an
// executor calls, the Guest reads its code and looks its names up without
// running code of the program; a globals dict with a key that could run code
// on a lookup makes the calls plain ones, with the same outcome.
func TestPythonExecutorsForwarderRunsNoCode(t *testing.T) {
	src := `from concurrent.futures import ThreadPoolExecutor
class Key:
    def __hash__(self):
        return hash("read")
    def __eq__(self, other):
        print("__eq__ ran")
        return False
globals()[Key()] = 1
with ThreadPoolExecutor() as ex:
    result = list(ex.map(lambda k: read(key=k), "ab"))
`
	var outs []string
	for _, early := range []bool{true, false} {
		b := newBarrier(1)
		out, err := barrierRunner(t, b, nil).Run(context.Background(), spine.Request{Source: src, EarlyReads: early})
		if err != nil {
			t.Fatalf("early reads %v: %v", early, err)
		}
		if _, peak := b.counts(); peak != 1 {
			t.Errorf("early reads %v: %d reads at once, want 1", early, peak)
		}
		outs = append(outs, fmt.Sprintf("%s|%q|%d", out.Value, out.Stdout, out.ToolCalls))
	}
	if outs[0] != outs[1] || !strings.HasPrefix(outs[0], `["v:a","v:b"]|`) {
		t.Fatalf("on: %s\noff: %s\nwant the same, with the value [\"v:a\",\"v:b\"]", outs[0], outs[1])
	}
}

// TestPythonExecutorsBudget: a call handed to an executor counts against the
// tool-call budget as the call it stands for, in the program's order, with
// early reads on or off.
func TestPythonExecutorsBudget(t *testing.T) {
	src := `from concurrent.futures import ThreadPoolExecutor
ex = ThreadPoolExecutor()
fs = [ex.submit(read, key=k) for k in "abcd"]
fs.append(ex.submit(write, what="x"))
out = []
for f in fs:
    try:
        out.append(f.result())
    except RuntimeError as e:
        out.append(str(e))
result = out`
	var outs []string
	for _, early := range []bool{true, false} {
		r := barrierRunner(t, newBarrier(1), &spine.Options{MaxToolCalls: 3})
		out, err := r.Run(context.Background(), spine.Request{Source: src, EarlyReads: early})
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, fmt.Sprintf("%s %d", out.Value, out.ToolCalls))
	}
	want := `["v:a","v:b","v:c","tool call budget exhausted","tool call budget exhausted"] 3`
	if outs[0] != want || outs[1] != want {
		t.Fatalf("on: %s\noff: %s\nwant %s", outs[0], outs[1], want)
	}
}

// TestPythonExecutorsUnclaimed: a call started on the Host that the program
// never looks at still counts, as it does with early reads off, and the run
// waits for it.
func TestPythonExecutorsUnclaimed(t *testing.T) {
	src := `from concurrent.futures import ThreadPoolExecutor
ex = ThreadPoolExecutor()
for k in "abcd":
    ex.submit(read, key=k)
result = "done"`
	for _, early := range []bool{true, false} {
		b := newBarrier(1)
		if early {
			b = newBarrier(4)
		}
		out, err := barrierRunner(t, b, nil).Run(context.Background(), spine.Request{Source: src, EarlyReads: early})
		if err != nil {
			t.Fatal(err)
		}
		if started, _ := b.counts(); out.ToolCalls != 4 || started != 4 {
			t.Fatalf("early reads %v: %d tool calls, %d started, want 4", early, out.ToolCalls, started)
		}
	}
}

// TestPythonExecutorSemantics: ThreadPoolExecutor as CPython's for programs
// that do not depend on preemption.
func TestPythonExecutorSemantics(t *testing.T) {
	r := shared(t)
	for _, tc := range []struct{ name, src, want string }{
		{"map order and exceptions", `from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(max_workers=2) as ex:
    it = ex.map(lambda x: 10 // x, [5, 2, 0, 1])
    out = [next(it), next(it)]
    try:
        next(it)
    except ZeroDivisionError:
        out.append("ZeroDivisionError")
result = out`, `[2,5,"ZeroDivisionError"]`},
		{"map with several iterables and a timeout", `from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor() as ex:
    result = list(ex.map(pow, [2, 3, 4], [1, 2], timeout=5))`, `[2,9]`},
		{"max_workers", `from concurrent.futures import ThreadPoolExecutor
out = []
for bad in (0, -1):
    try:
        ThreadPoolExecutor(max_workers=bad)
    except ValueError as e:
        out.append(str(e))
try:
    ThreadPoolExecutor(initializer=3)
except TypeError as e:
    out.append(str(e))
result = out`, `["max_workers must be greater than 0","max_workers must be greater than 0","initializer must be a callable"]`},
		{"shutdown", `from concurrent.futures import ThreadPoolExecutor
ex = ThreadPoolExecutor()
f = ex.submit(sum, [1, 2])
ex.shutdown(wait=True)
try:
    ex.submit(sum, [3])
except RuntimeError as e:
    err = str(e)
result = [f.result(), err]`, `[3,"cannot schedule new futures after shutdown"]`},
		{"initializer", `from concurrent.futures import ThreadPoolExecutor
seen = []
with ThreadPoolExecutor(initializer=seen.append, initargs=("init",)) as ex:
    result = [ex.submit(len, "abc").result(), ex.submit(len, "").result(), seen]`, `[3,0,["init"]]`},
		{"a failing initializer breaks the pool", `from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.thread import BrokenThreadPool
def boom():
    raise ValueError("no")
ex = ThreadPoolExecutor(initializer=boom)
f = ex.submit(len, "a")
try:
    ex.submit(len, "b")
except BrokenThreadPool as e:
    later = "broken"
result = [type(f.exception()).__name__, later]`, `["BrokenThreadPool","broken"]`},
		{"future states and callbacks", `from concurrent.futures import ThreadPoolExecutor, CancelledError
calls = []
with ThreadPoolExecutor() as ex:
    f = ex.submit(divmod, 7, 2)
    f.add_done_callback(lambda fut: calls.append(fut.result()))
    g = ex.submit(int, "x")
result = [f.done(), f.running(), f.cancel(), f.cancelled(), f.result(), calls, type(g.exception()).__name__]`, `[true,false,false,false,[3,1],[[3,1]],"ValueError"]`},
		{"a tool through the executor with early reads off", `from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor() as ex:
    f = ex.submit(lookup, key="book")
    g = ex.submit(lookup, key="none")
    h = ex.submit(lookup, "book", key="pen")
    i = ex.submit(lookup, "pen")
result = [f.result(), str(g.exception()), str(h.exception()), i.result()]`, `[21,"no such key: \"none\"","lookup() got multiple values for argument 'key'",2]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := spinetest.MustRun(t, r, spine.Request{Source: tc.src})
			if string(out.Value) != tc.want {
				t.Fatalf("value %s, want %s", out.Value, tc.want)
			}
		})
	}
	out := spinetest.MustRun(t, r, spine.Request{Source: `from concurrent.futures import ThreadPoolExecutor
def boom():
    raise ValueError("no")
f = ThreadPoolExecutor(initializer=boom).submit(len, "a")`})
	if !strings.Contains(out.Stderr, "Exception in initializer:") || !strings.Contains(out.Stderr, "ValueError: no") {
		t.Fatalf("stderr: %q", out.Stderr)
	}
}

// TestPythonThreads: Thread.start runs the thread to its end at once.
func TestPythonThreads(t *testing.T) {
	r := shared(t)
	out := spinetest.MustRun(t, r, spine.Request{Source: `import threading
results = []
def work(n):
    results.append(n * n)
threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
def bad():
    raise ValueError("in a thread")
b = threading.Thread(target=bad, name="worker")
b.start()
b.join()
try:
    threads[0].start()
except RuntimeError as e:
    again = str(e)
result = [results, [t.is_alive() for t in threads], again, threading.active_count()]`})
	if string(out.Value) != `[[0,1,4,9],[false,false,false,false],"threads can only be started once",1]` {
		t.Fatalf("value %s", out.Value)
	}
	if !strings.Contains(out.Stderr, "Exception in thread worker") || !strings.Contains(out.Stderr, "ValueError: in a thread") {
		t.Fatalf("stderr %q", out.Stderr)
	}
}

// TestPythonNoNetwork: every way to the network says there is none, with an
// OSError a program can catch.
func TestPythonNoNetwork(t *testing.T) {
	out := spinetest.MustRun(t, shared(t), spine.Request{Source: `import errno, socket, http.client, urllib.request, urllib.error
out = []
def attempt(name, fn):
    try:
        fn()
    except OSError as e:
        out.append([name, type(e).__name__, e.errno == errno.ENETUNREACH, "no network in the sandbox" in str(e)])
attempt("socket", socket.socket)
attempt("socket tcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
attempt("create_connection", lambda: socket.create_connection(("example.com", 80)))
attempt("getaddrinfo", lambda: socket.getaddrinfo("example.com", 80))
attempt("gethostbyname", lambda: socket.gethostbyname("example.com"))
attempt("socketpair", socket.socketpair)
attempt("http.client", lambda: http.client.HTTPConnection("example.com").request("GET", "/"))
try:
    urllib.request.urlopen("http://example.com/")
except urllib.error.URLError as e:
    out.append(["urlopen", type(e.reason).__name__, e.reason.errno == errno.ENETUNREACH, "no network in the sandbox" in str(e)])
result = out`})
	want := `[["socket","OSError",true,true],["socket tcp","OSError",true,true],["create_connection","OSError",true,true],` +
		`["getaddrinfo","gaierror",true,true],["gethostbyname","gaierror",true,true],["socketpair","OSError",true,true],` +
		`["http.client","OSError",true,true],["urlopen","OSError",true,true]]`
	if string(out.Value) != want {
		t.Fatalf("value %s\nwant  %s", out.Value, want)
	}
}

// TestPythonWorldInSessions: asyncio and executors across a session's runs,
// early reads on and off alike.
func TestPythonWorldInSessions(t *testing.T) {
	var values []string
	for _, early := range []bool{true, false} {
		b := newBarrier(1)
		if early {
			b = newBarrier(3)
		}
		s := spinetest.NewSession(t, barrierRunner(t, b, nil))
		var got []string
		for _, src := range []string{
			`import asyncio
from concurrent.futures import ThreadPoolExecutor
pool = ThreadPoolExecutor()
async def fetch_all(keys):
    return await asyncio.gather(*(asyncio.to_thread(read, key=k) for k in keys))
result = 0`,
			`result = asyncio.run(fetch_all(["a", "b", "c"]))`,
			`result = [f.result() for f in [pool.submit(read, key=k) for k in "xyz"]]`,
			`import sys
result = [__name__, sys.modules["__main__"].pool is pool]`,
		} {
			out, err := s.Run(context.Background(), spine.Request{Source: src, EarlyReads: early})
			if err != nil {
				t.Fatalf("early reads %v: %q: %v", early, src, err)
			}
			got = append(got, fmt.Sprintf("%s/%d", out.Value, out.ToolCalls))
		}
		values = append(values, strings.Join(got, " "))
	}
	want := `0/0 ["v:a","v:b","v:c"]/3 ["v:x","v:y","v:z"]/3 ["__main__",true]/0`
	if values[0] != want || values[1] != want {
		t.Fatalf("on:  %s\noff: %s\nwant %s", values[0], values[1], want)
	}
}
