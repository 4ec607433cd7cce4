package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The tests in this file check that the early-read machinery runs no code of
// the program: hostile keys planted in globals() and builtins, values whose
// class has a metaclass with __hash__, a program that rebinds the helper's
// name, a pass that falls back, and a stream over the source limit.

// hostileKey is Python that defines K(name): a key whose hash is name's and
// whose __eq__ (program code) prints; and M, a metaclass whose __hash__ and
// __eq__ print.
const hostileKey = `class K:
    def __init__(self, name):
        self.h = hash(name)
    def __hash__(self):
        return self.h
    def __eq__(self, other):
        print("K.__eq__ ran")
        return False
class M(type):
    def __hash__(cls):
        print("M.__hash__ ran")
        return 7
    def __eq__(cls, other):
        print("M.__eq__ ran")
        return False
class V(metaclass=M):
    pass
`

// hostilePrograms plant objects whose methods print where the early-read
// evaluator could look: every one must print exactly as with early reads off.
var hostilePrograms = []string{
	// A key in globals() colliding with a name an early read's arguments read.
	hostileKey + `g = globals()
g[K("k")] = 1
k = "b"
a = slow(k="a")
b = slow(k=k)
result = [a, b]`,
	// The same in builtins, colliding with a built-in function the arguments call.
	// ("len" is put back after the key, so a lookup of it meets the key first.)
	hostileKey + `import builtins
keep = builtins.len
del builtins.len
bad = K("len")
builtins.__dict__[bad] = 1
builtins.len = keep
n = [1, 2]
a = slow(k="a")
b = slow(k=len(n))
del builtins.__dict__[bad]
result = [a, b]`,
	// A value whose type's metaclass hashes: checking its type must not hash it.
	hostileKey + `v = V()
a = slow(k="a")
try:
    b = slow(k=v)
except TypeError as e:
    b = str(e)
try:
    c = slow(k=[1, v])
except TypeError as e:
    c = str(e)
result = [a, b, c]`,
	// A key colliding with the helper's name: the prepare statements look nothing up.
	hostileKey + `g = globals()
g[K("__spine_" + "prepare")] = 1
x = "b"
a = slow(k="a")
b = slow(k=x)
result = [a, b]`,
	// Inputs hold plain data only, but the program may put anything in them.
	hostileKey + `inputs["v"] = V()
inputs[K("k")] = 2
a = slow(k="a")
b = slow(k=inputs["k"])
result = [a, b]`,
}

func TestPLMHostileObjectsRunNothing(t *testing.T) {
	g := newGate()
	r := gateRunner(t, g, nil)
	for i, src := range hostilePrograms {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			in := map[string]any{"k": "c"}
			off := differentialRunRequest(r, spine.Request{Source: src, Inputs: in})
			if off.Error != "" {
				t.Fatalf("the program fails with early reads off: %s", off.Error)
			}
			on := differentialRunRequest(r, spine.Request{Source: src, Inputs: in, EarlyReads: true})
			if !differentialEqual(off, on) {
				t.Fatalf("early reads on:\n%s\n--- off:\n%s", on, off)
			}
			streamed := differentialRunRequest(r, spine.Request{Stream: &chunkReader{data: []byte(src), rng: rand.New(rand.NewPCG(uint64(i), 1)), max: 7}, Inputs: in})
			if !differentialEqual(off, streamed) {
				t.Fatalf("streamed:\n%s\n--- off:\n%s", streamed, off)
			}
		})
	}
}

// TestPLMHelperCannotBeShadowed: a program that binds __spine_prepare in its
// globals (under a name its source does not spell) does not see the prepare
// statements call it, and they still prepare: a's call returns only once b's
// read has started, before the program reaches b's call.
func TestPLMHelperCannotBeShadowed(t *testing.T) {
	src := `g = globals()
g["__spine_" + "prepare"] = lambda *a: print("shadowed", a)
k = "b"
a = slow(k="a", wait=[k])
b = slow(k=k)
result = [a, b]`
	g := newGate()
	out := spinetest.MustRun(t, gateRunner(t, g, nil), spine.Request{Source: src, EarlyReads: true})
	if string(out.Value) != `["v:a","v:b"]` || out.Stdout != "" || out.ToolCalls != 2 {
		t.Fatalf("value %s, stdout %q, %d tool calls", out.Value, out.Stdout, out.ToolCalls)
	}
}

// TestPLMFallbackPrintsOnce: a program too deep for the pass (it falls back
// to the program as written; this one is then too deep to compile as well)
// prints its parser warning once, as with early reads off. The warning is
// shown because an earlier run of the session asked for every warning.
func TestPLMFallbackPrintsOnce(t *testing.T) {
	g := newGate()
	r := gateRunner(t, g, nil)
	deep := "x = '\\d'\na = slow(k='a')\nb = " + strings.Repeat("not ", 600) + "slow(k='b')\nresult = [a, b, len(x)]"
	var outs [2]*spine.Output
	var errs [2]error
	for i, early := range []bool{false, true} {
		s, err := r.NewSession(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(context.Background(), spine.Request{Source: "import warnings\nwarnings.simplefilter('always')"}); err != nil {
			t.Fatal(err)
		}
		outs[i], errs[i] = s.Run(context.Background(), spine.Request{Source: deep, EarlyReads: early})
		s.Close(context.Background())
	}
	if n := strings.Count(outs[0].Stderr, "invalid escape sequence"); n != 1 {
		t.Fatalf("early reads off: the warning is printed %d times:\n%s", n, outs[0].Stderr)
	}
	if outs[1].Stderr != outs[0].Stderr || fmt.Sprint(errs[1]) != fmt.Sprint(errs[0]) {
		t.Fatalf("stderr on %q, off %q; error on %v, off %v", outs[1].Stderr, outs[0].Stderr, errs[1], errs[0])
	}
	// Prefix mode parses each statement while the program streams: it prints nothing.
	src := "x = '\\d'\ny = 1if x else 2\na = slow(k='a')\nresult = [a, len(x), y]\n"
	var stderr [2]string
	for i, stream := range []bool{false, true} {
		s, err := r.NewSession(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(context.Background(), spine.Request{Source: "import warnings\nwarnings.simplefilter('always')"}); err != nil {
			t.Fatal(err)
		}
		req := spine.Request{Source: src}
		if stream {
			req = spine.Request{Stream: &chunkReader{data: []byte(src), rng: rand.New(rand.NewPCG(5, 6)), max: 3}}
		}
		out, err := s.Run(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		stderr[i] = out.Stderr
		s.Close(context.Background())
	}
	if stderr[0] != stderr[1] || !strings.Contains(stderr[0], "invalid escape") {
		t.Fatalf("stderr streamed %q, sent whole %q", stderr[1], stderr[0])
	}
}

// TestPrefixOversizedStream: a stream over MaxSource fails with the error of
// the same source sent whole, and no byte past the limit reaches the Guest: a
// read that only the bytes past it name never starts.
func TestPrefixOversizedStream(t *testing.T) {
	g := newGate()
	r := gateRunner(t, g, &spine.Options{MaxSource: 200})
	src := "a = slow(k='early')\n" + strings.Repeat("#\n", 100) + "b = slow(k='late')\nc = 1\n"
	_, whole := r.Run(context.Background(), spine.Request{Source: src, EarlyReads: true})
	out, streamed := r.Run(context.Background(), spine.Request{Stream: &chunkReader{data: []byte(src), rng: rand.New(rand.NewPCG(1, 2)), max: 5}})
	if !errors.Is(whole, spine.ErrTooLarge) || fmt.Sprint(whole) != fmt.Sprint(streamed) || out != nil {
		t.Fatalf("whole: %v\nstreamed: %v (output %v)", whole, streamed, out)
	}
	_, started, _ := g.snapshot()
	if started["late"] != 0 {
		t.Fatalf("a read past the limit started: %v", started)
	}
	// A stream that fails while it is drained reports its own failure.
	_, err := r.Run(context.Background(), spine.Request{Stream: io.MultiReader(strings.NewReader(src), spinetest.ErrReader{})})
	if !errors.Is(err, spinetest.ErrConnectionReset) || errors.Is(err, spine.ErrTooLarge) || errors.Is(err, spine.ErrGuest) {
		t.Fatalf("err = %v", err)
	}
}

// memoryProbe ends a program: it allocates MiB blocks until MemoryError and
// sets result to how many fit, with what the program holds itself.
const memoryProbe = `
blocks = []
try:
    while True:
        blocks.append(bytearray(1 << 20))
except MemoryError:
    pass
fit = len(blocks)
del blocks
result = fit
`

// TestPLMMemoryAtTheLimit: early reads take no memory a program can notice.
// Each program fills the Guest's memory after its reads; as many MiB fit with
// early reads on (a whole program, or streamed in prefix mode) as off. The
// reads are large and some are never claimed; the program without tool calls
// holds large values prefix mode computes too.
func TestPLMMemoryAtTheLimit(t *testing.T) {
	g := newGate()
	r := gateRunner(t, g, &spine.Options{MemoryLimit: 128 << 20})
	for _, src := range []string{
		// 40 reads of 400 KB each prepared at the loop's entry, one claimed.
		"big = 'x' * 400000\nfor i in range(40):\n    v = slow(k=big + str(i))\n    break\n" + memoryProbe,
		// 40 reads of 400 KB each, all claimed.
		"big = 'x' * 400000\nout = 0\nfor i in range(40):\n    out += len(slow(k=big + str(i)))\n" + memoryProbe,
		// No tool call: simple assignments of large values prefix mode can compute.
		"s0 = 'x' * 1000000\n" + func() string {
			var b strings.Builder
			for i := 1; i < 30; i++ {
				fmt.Fprintf(&b, "s%d = s%d[:-1] + '%d'\n", i, i-1, i%10)
			}
			return b.String()
		}() + memoryProbe,
	} {
		off := differentialRunRequest(r, spine.Request{Source: src})
		on := differentialRunRequest(r, spine.Request{Source: src, EarlyReads: true})
		streamed := differentialRunRequest(r, spine.Request{Stream: &chunkReader{data: []byte(src), rng: rand.New(rand.NewPCG(3, 4)), max: 64}})
		if off.Error != "" || off.Value == "0" {
			t.Fatalf("early reads off: %s", off)
		}
		t.Logf("MiB that fit: off %s, on %s, streamed %s", off.Value, on.Value, streamed.Value)
		if on.Value != off.Value || streamed.Value != off.Value || on.Error != "" || streamed.Error != "" {
			t.Errorf("%s\n--- off:\n%s\n--- on:\n%s\n--- streamed:\n%s", src[:60], off, on, streamed)
		}
	}
}

// TestPrefixChainedRead: in prefix mode, a read whose arguments depend only on
// the values of reads prefix mode started (bound to their names when they
// arrive) starts while the program still streams: c's read starts before the
// program runs mark(), which comes before b and c.
func TestPrefixChainedRead(t *testing.T) {
	g := newGate()
	r := gateRunner(t, g, nil)
	src := "a = slow(k=\"a\")\nm = mark(x=1)\nb = slow(k=\"b\")\nc = slow(k=a + \"-\" + b)\nresult = [a, b, c]\n"
	head := strings.Index(src, "result") + 1 // c's statement is complete
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(src[:head]))
		// Once a and b have ended, the next chunk finds their values.
		for {
			g.mu.Lock()
			done := slices.Contains(g.events, "end:a") && slices.Contains(g.events, "end:b")
			changed := g.changed
			g.mu.Unlock()
			if done {
				break
			}
			<-changed
		}
		// The rest goes a byte at a time, each a chunk of its own and so a
		// pass of its own: a's and b's tools have returned, and their
		// futures settle right after, so one of these passes finds both
		// values and starts the chained read before the program runs.
		for i := head; i < len(src); i++ {
			pw.Write([]byte(src[i : i+1]))
		}
		// A loaded machine may settle them only after those passes: a
		// comment, a byte at a time, gives passes until the chained read
		// has started (bounded: a pass that never starts it fails below).
		pw.Write([]byte("#"))
		for range 1 << 14 {
			g.mu.Lock()
			started := g.started["v:a-v:b"] > 0
			g.mu.Unlock()
			if started {
				break
			}
			pw.Write([]byte("#"))
		}
		pw.Close()
	}()
	out, err := r.Run(context.Background(), spine.Request{Stream: pr})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != `["v:a","v:b","v:v:a-v:b"]` || out.ToolCalls != 4 {
		t.Fatalf("value %s, %d tool calls", out.Value, out.ToolCalls)
	}
	// Every read of slow, the chained one last, started before the program
	// called mark: early, while it streamed. The record's Start is when the
	// Host started each (an early read's when the Guest prepared it), not
	// when its goroutine got to run, which the gate's events show.
	events, started, _ := g.snapshot()
	var mark time.Duration = -1
	var last time.Duration
	early := 0
	for _, c := range out.Calls {
		switch {
		case c.Tool == "mark":
			mark = c.Start
		case c.Tool == "slow" && c.Early:
			early++
			last = max(last, c.Start)
		}
	}
	if early != 3 || mark < 0 || last > mark || started["v:a-v:b"] != 1 {
		t.Fatalf("the chained read did not start while the program streamed: calls %+v, events %v", out.Calls, events)
	}
}

// TestPLMProgramCannotPeek: a program asking after a read with a call of the
// tool "" is making a call of an unknown tool (only the Guest's own windows,
// where no program code runs, get a read's value without claiming it: see
// TestProgramCannotPeekThroughPeek).
func TestPLMProgramCannotPeek(t *testing.T) {
	g := newGate()
	r := gateRunner(t, g, nil)
	src := `import _spine
h = _spine.prepare(b'{"tool":"slow","args":{"k":"x"}}')
result = [h > 0, _spine.call(b'{"tool":"","args":{"peek":%d}}' % h).decode()]`
	out := spinetest.MustRun(t, r, spine.Request{Source: src, EarlyReads: true})
	if string(out.Value) != `[true,"{\"value\":null,\"error\":\"unknown tool: \"}"]` || out.ToolCalls != 1 {
		t.Fatalf("value %s, %d tool calls", out.Value, out.ToolCalls)
	}
}
