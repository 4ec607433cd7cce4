package spine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// caller answers a run's own tool ask as spine serve's caller does: a call
// waits until the run pauses (its program waits for one of them, and every
// call it started has reached ask), then every pending call is answered
// at once with answer(args). It notes each call's number as it arrives.
type caller struct {
	mu      sync.Mutex
	wait    ToolWait
	entered map[int]chan struct{}
	asked   []int
	pauses  []string          // Call/Started of each pause
	stopAt  int               // the pause at which the run is given up (0: none)
	stopped chan *Record      // the record of that pause
	stop    func()            // gives the run up
	seen    map[string]int    // calls by args, to catch one asked twice
	order   []json.RawMessage // args as asked
	// answered, for a continuation's caller, is how many of the calls
	// numbered up to its record's Started the record answers: those never
	// reach ask here. -1: a run's own caller, which sees every call.
	answered int
}

func newCaller() *caller {
	return &caller{entered: map[int]chan struct{}{}, seen: map[string]int{}, stopped: make(chan *Record, 1), answered: -1}
}

func (c *caller) manifest() Manifest {
	return Manifest{"ask": {Description: "Ask the caller.", AllowEarlyRead: true, Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		n := ToolCallOf(ctx)
		answered := make(chan struct{})
		c.mu.Lock()
		c.asked = append(c.asked, n)
		c.seen[string(args)]++
		c.entered[n] = answered
		c.check()
		c.mu.Unlock()
		select {
		case <-answered:
			var a struct{ Q string }
			_ = json.Unmarshal(args, &a)
			return "v" + a.Q, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}}
}

func (c *caller) waiting(w ToolWait) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wait = w
	c.check()
}

// check answers every pending call once the run has paused. Under c.mu.
func (c *caller) check() {
	w := c.wait
	if w.Call == 0 || c.entered[w.Call] == nil || len(c.asked) < w.Started-c.base() {
		return
	}
	c.wait = ToolWait{}
	c.pauses = append(c.pauses, fmt.Sprint(w.Call, "/", w.Started))
	if len(c.pauses) == c.stopAt {
		c.stopped <- w.Record
		c.stop()
		return
	}
	for n, ch := range c.entered {
		close(ch)
		delete(c.entered, n)
	}
}

// base is how many calls were numbered that this caller never sees: a
// continuation's caller sees only those its record did not answer. (The
// calls it sees may enter in any order, so the smallest number asked so
// far does not tell.)
func (c *caller) base() int {
	return max(c.answered, 0)
}

// earlyPrograms are runs of the own tool ask with early reads: a loop of
// reads asked together, a Runner's read between, and reads whose
// arguments are the first reads' values; with executors and asyncio.
var earlyPrograms = map[string]string{
	"loop": `
firsts = []
for k in inputs["keys"]:
    firsts.append(ask(q=k))
price = lookup(key="book")
seconds = []
for v in firsts:
    seconds.append(ask(q=v + "2"))
print("got", len(seconds))
result = [firsts, price, seconds]
`,
	"executor": `
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor() as ex:
    fs = [ex.submit(ask, q=k) for k in inputs["keys"]]
    firsts = [f.result() for f in fs]
price = lookup(key="book")
with ThreadPoolExecutor() as ex:
    seconds = list(ex.map(lambda v: ask(q=v + "2"), firsts))
result = [firsts, price, seconds]
`,
	"late": `
a = ask(q=inputs["keys"][0])
c = ask(q=a + "2")
price = lookup(key="book")
b = ask(q=inputs["keys"][1])
d = ask(q=b + "2")
result = [a, b, c, d, price]
`,
	"asyncio": `
import asyncio
async def main():
    firsts = await asyncio.gather(*[asyncio.to_thread(ask, q=k) for k in inputs["keys"]])
    price = lookup(key="book")
    seconds = await asyncio.gather(*[asyncio.to_thread(ask, q=v + "2") for v in firsts])
    return [list(firsts), price, list(seconds)]
result = asyncio.run(main())
`,
}

// TestContinueEarlyReads: a run with early reads on, given up where it
// waits for the caller (as a replica that dies), is continued from the
// record of that wait by another Runner: the calls pending there are asked
// again under the numbers the caller holds, none it answered is asked
// again, the Runner's tool is not called again, and the run ends as it does
// uninterrupted. At each pause of its own, with early reads on, off, and in
// prefix mode (the program streamed in; continued whole).
func TestContinueEarlyReads(t *testing.T) {
	inputs := json.RawMessage(`{"keys": ["a", "b", "c"]}`)
	for name, src := range earlyPrograms {
		for _, mode := range []string{"on", "off", "prefix"} {
			for _, at := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/early=%s/pause%d", name, mode, at), func(t *testing.T) {
					continueEarly(t, name, src, inputs, mode, at)
				})
			}
		}
	}
}

func continueEarly(t *testing.T, name, src string, inputs json.RawMessage, mode string, at int) {
	var lookups atomic.Int64
	r := newRunner(t, countingManifest(&lookups), nil)
	whole := newCaller()
	req := Request{Source: src, Inputs: inputs, EarlyReads: mode == "on", Record: true, Tools: whole.manifest(), Waiting: whole.waiting}
	if mode == "prefix" { // streamed in: prefix mode
		req.Source, req.Stream = "", strings.NewReader(src)
	}
	want, err := r.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if mode != "off" && (name == "loop" || name == "asyncio") && fmt.Sprint(whole.pauses) != "[1/3 4/6]" {
		t.Fatalf("uninterrupted: pauses %v, asked %v", whole.pauses, whole.asked)
	}

	// Given up at pause at: its record is all another Runner gets.
	first := newCaller()
	first.stopAt = at
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first.stop = cancel
	req.Tools, req.Waiting = first.manifest(), first.waiting
	if mode == "prefix" {
		req.Stream = strings.NewReader(src)
	}
	if _, err := r.Run(ctx, req); err == nil {
		t.Fatal("the run given up ended")
	}
	rec := <-first.stopped
	encoded, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if rec, err = ParseRecord(encoded); err != nil {
		t.Fatal(err)
	}
	// Asked again: the calls pending at the record's wait that had not
	// finished (one the caller answered that had finished has its response
	// on the record), and those the uninterrupted run started after it.
	var wantAsked []int
	wantLookups := int64(1)
	for _, c := range rec.Calls {
		if c.Tool == "lookup" {
			wantLookups = 0
		}
	}
	for _, p := range rec.Waiting.Pending {
		if p.N > 0 && p.Response == nil {
			wantAsked = append(wantAsked, p.N)
		}
		if p.Tool == "lookup" {
			if p.Response == nil {
				t.Fatalf("the record's wait lists a read of lookup without its answer: %+v", rec.Waiting)
			}
			wantLookups = 0
		}
	}
	taken := len(wantAsked) // the calls pending at the wait that are asked again
	for _, n := range whole.asked {
		if n > rec.Waiting.Started {
			wantAsked = append(wantAsked, n)
		}
	}
	lookups.Store(0)

	r2 := newRunner(t, countingManifest(&lookups), nil)
	next := newCaller()
	next.answered = rec.Waiting.Started - taken
	out, err := r2.Continue(context.Background(), rec, Request{Tools: next.manifest(), Waiting: next.waiting, Record: true})
	if err != nil {
		t.Fatal(err)
	}
	sameOutput(t, want, out)
	if out.ToolCalls != want.ToolCalls {
		t.Fatalf("continuation: %d calls, the run %d", out.ToolCalls, want.ToolCalls)
	}
	if lookups.Load() != wantLookups {
		t.Fatalf("the continuation called lookup %d times, want %d (the record: %+v)", lookups.Load(), wantLookups, rec.Waiting)
	}
	slices.Sort(next.asked)
	slices.Sort(wantAsked)
	if fmt.Sprint(next.asked) != fmt.Sprint(wantAsked) || fmt.Sprint(next.pauses) != fmt.Sprint(whole.pauses[at-1:]) {
		t.Fatalf("continuation asked %v (pauses %v), want %v (pauses %v; the record's wait %+v)", next.asked, next.pauses, wantAsked, whole.pauses, rec.Waiting)
	}
	for args, n := range next.seen {
		if n != 1 {
			t.Fatalf("ask(%s) asked %d times", args, n)
		}
	}
	// Its record is the whole run's: it replays.
	if _, err := r2.Replay(context.Background(), out.Record, nil); err != nil {
		t.Fatal(err)
	}
}

// TestContinueWaitingRefused: a record whose wait no run could have
// written is refused (ErrBadRequest), and one whose program does not call
// what its run waited for diverges there, asking nothing.
func TestContinueWaitingRefused(t *testing.T) {
	r := newRunner(t, testManifest(), nil)
	c := newCaller()
	c.stopAt = 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.stop = cancel
	req := Request{Source: earlyPrograms["loop"], Inputs: json.RawMessage(`{"keys": ["a", "b", "c"]}`), EarlyReads: true, Record: true, Tools: c.manifest(), Waiting: c.waiting}
	if _, err := r.Run(ctx, req); err == nil {
		t.Fatal("the run given up ended")
	}
	rec := <-c.stopped
	encoded, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	edited := func(edit func(w *RecordWait)) *Record {
		rec, err := ParseRecord(encoded)
		if err != nil {
			t.Fatal(err)
		}
		edit(rec.Waiting)
		return rec
	}
	for name, edit := range map[string]func(w *RecordWait){
		"a number past started": func(w *RecordWait) { w.Pending[0].N = w.Started + 1 },
		"a number twice":        func(w *RecordWait) { w.Pending[1].N = w.Pending[0].N },
		"waited not pending":    func(w *RecordWait) { w.Call = 99 },
		"a Runner's tool numbered": func(w *RecordWait) {
			w.Pending[0].Tool = "lookup"
		},
		"too many": func(w *RecordWait) {
			for range 100 {
				w.Pending = append(w.Pending, RecordedStart{Tool: "lookup", Args: json.RawMessage(`{"key":"book"}`)})
			}
		},
	} {
		next := newCaller()
		if _, err := r.Continue(context.Background(), edited(edit), Request{Tools: next.manifest()}); !errors.Is(err, ErrBadRequest) || len(next.asked) != 0 {
			t.Errorf("%s: %v (asked %v), want ErrBadRequest", name, err, next.asked)
		}
	}
	next := newCaller()
	rec = edited(func(w *RecordWait) {
		for i := range w.Pending {
			if w.Pending[i].N == w.Call {
				w.Pending[i].Args = json.RawMessage(`{"q":"z"}`)
			}
		}
	})
	if _, err := r.Continue(context.Background(), rec, Request{Tools: next.manifest(), Waiting: next.waiting}); !errors.Is(err, ErrDiverged) || len(next.asked) != 0 {
		t.Fatalf("a waited call the program does not make: %v (asked %v), want ErrDiverged", err, next.asked)
	}
}
