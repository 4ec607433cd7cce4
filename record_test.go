package spine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
)

// recordedProgram uses everything a run takes from the Host: random
// numbers, the clock, uuid4, files' times and three tool calls.
const recordedProgram = `
import os, random, time, uuid
a = lookup(key="book")
b = lookup(key="pen")
c = echo(n=random.randint(0, 10**9))
with open("out.txt", "w") as f:
    f.write("x")
print(random.random(), time.time(), time.monotonic(), uuid.uuid4(), os.urandom(4).hex(), os.stat("out.txt").st_mtime_ns)
result = {"a": a, "b": b, "c": c, "t": time.time()}
`

// countingManifest is testManifest whose tools count their calls.
func countingManifest(calls *atomic.Int64) Manifest {
	m := testManifest()
	for name, spec := range m {
		call := spec.Call
		spec.Call = func(ctx context.Context, args json.RawMessage) (any, error) {
			calls.Add(1)
			return call(ctx, args)
		}
		m[name] = spec
	}
	return m
}

// recordRun runs req with a record on r and returns the output.
func recordRun(t *testing.T, r *Runner, req Request) *Output {
	t.Helper()
	req.Record = true
	out, err := r.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if out.Record == nil || out.Record.Incomplete != "" {
		t.Fatalf("record: %+v", out.Record)
	}
	return out
}

// sameOutput fails the test unless a replay's output is the recorded run's.
func sameOutput(t *testing.T, want, got *Output) {
	t.Helper()
	if string(want.Value) != string(got.Value) || want.Stdout != got.Stdout || want.Stderr != got.Stderr {
		t.Fatalf("replay differs:\nrecorded %s %q %q\nreplayed %s %q %q", want.Value, want.Stdout, want.Stderr, got.Value, got.Stdout, got.Stderr)
	}
}

func TestRecordReplay(t *testing.T) {
	for _, early := range []bool{false, true} {
		var calls atomic.Int64
		r := newRunner(t, countingManifest(&calls), nil)
		out := recordRun(t, r, Request{Source: recordedProgram, EarlyReads: early})
		rec := out.Record
		if n := len(rec.Calls); n != 3 || calls.Load() != 3 {
			t.Fatalf("early %v: %d calls recorded, %d made", early, n, calls.Load())
		}
		if len(rec.Clock.Wall) == 0 || len(rec.Clock.Mono) == 0 || len(rec.Random) == 0 {
			t.Fatalf("early %v: clock %d/%d reads, %d random bytes", early, len(rec.Clock.Wall), len(rec.Clock.Mono), len(rec.Random))
		}
		encoded, err := rec.Encode()
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := ParseRecord(encoded)
		if err != nil {
			t.Fatal(err)
		}
		calls.Store(0)
		var traced []string
		replayed, err := r.Replay(context.Background(), parsed, &ReplayOptions{Trace: func(c ReplayedCall) { traced = append(traced, c.Tool) }})
		if err != nil {
			t.Fatalf("early %v: %v", early, err)
		}
		sameOutput(t, out, replayed)
		if replayed.ToolCalls != 3 || len(replayed.Calls) != 3 || replayed.Calls[0] != out.Calls[0] {
			t.Fatalf("early %v: the replay's calls %d %+v, the run's %+v", early, replayed.ToolCalls, replayed.Calls, out.Calls)
		}
		if calls.Load() != 0 || strings.Join(traced, " ") != "lookup lookup echo" {
			t.Fatalf("early %v: the replay called %d tools, traced %v", early, calls.Load(), traced)
		}
		// A second run is another run: other numbers.
		again := recordRun(t, r, Request{Source: recordedProgram, EarlyReads: early})
		if again.Stdout == out.Stdout {
			t.Fatalf("two runs printed the same: %q", out.Stdout)
		}
	}
}

func TestReplayDiverges(t *testing.T) {
	r := newRunner(t, testManifest(), nil)
	out := recordRun(t, r, Request{Source: recordedProgram})
	edited := *out.Record
	edited.Source = strings.Replace(recordedProgram, `b = lookup(key="pen")`, `b = echo(key="pen")`, 1)
	_, err := r.Replay(context.Background(), &edited, nil)
	if !errors.Is(err, ErrDiverged) || !strings.Contains(err.Error(), `call 2: the program called echo({"key":"pen"}) where the record has lookup({"key":"pen"})`) {
		t.Fatalf("edited program: %v", err)
	}
	edited.Source = strings.Replace(recordedProgram, `b = lookup(key="pen")`, `b = lookup(key="pen"); fail()`, 1)
	_, err = r.Replay(context.Background(), &edited, nil)
	if !errors.Is(err, ErrDiverged) || !strings.Contains(err.Error(), "call 3: the program called fail({})") {
		t.Fatalf("edited program: %v", err)
	}
	edited.Source = strings.Replace(recordedProgram, `c = echo(n=random.randint(0, 10**9))`, `c = 1`, 1)
	_, err = r.Replay(context.Background(), &edited, nil)
	if !errors.Is(err, ErrDiverged) || !strings.Contains(err.Error(), "the record holds 3, the next echo(") {
		t.Fatalf("edited program: %v", err)
	}
	other := *out.Record
	other.Guest.Artifact = "0123456789abcdef"
	if _, err = r.Replay(context.Background(), &other, nil); !errors.Is(err, ErrDiverged) || !strings.Contains(err.Error(), "another Guest build") {
		t.Fatalf("other build: %v", err)
	}
}

// TestReplayModes records and replays programs with asyncio, an executor,
// a failing tool, a sleep, and a program streamed in (prefix mode).
func TestReplayModes(t *testing.T) {
	asyncProgram := `
import asyncio, random, time
async def one(k):
    await asyncio.sleep(random.random() / 1000)
    return await asyncio.to_thread(lookup, key=k)
async def main():
    return await asyncio.gather(one("book"), one("pen"), one("book"))
print(asyncio.run(main()), time.perf_counter())
`
	executorProgram := `
from concurrent.futures import ThreadPoolExecutor, as_completed
import uuid
with ThreadPoolExecutor() as ex:
    fs = [ex.submit(lookup, key=k) for k in ("book", "pen", "book")]
    got = sorted(f.result() for f in as_completed(fs))
try:
    fail()
except RuntimeError as e:
    print("failed:", e)
import time
time.sleep(0.05)
print(got, uuid.uuid4(), time.time())
`
	cases := []struct {
		name   string
		req    Request
		stream bool
	}{
		{name: "asyncio", req: Request{Source: asyncProgram}},
		{name: "asyncio early", req: Request{Source: asyncProgram, EarlyReads: true}},
		{name: "executor", req: Request{Source: executorProgram}},
		{name: "executor early", req: Request{Source: executorProgram, EarlyReads: true}},
		{name: "prefix", req: Request{Source: recordedProgram}, stream: true},
		{name: "prefix executor", req: Request{Source: executorProgram}, stream: true},
	}
	var calls atomic.Int64
	r := newRunner(t, countingManifest(&calls), nil)
	for _, c := range cases {
		if c.stream {
			c.req.Stream, c.req.Source = strings.NewReader(c.req.Source), ""
		}
		calls.Store(0)
		out := recordRun(t, r, c.req)
		made := calls.Load()
		if c.stream && !out.Record.Prefix {
			t.Fatalf("%s: the record does not say prefix mode", c.name)
		}
		calls.Store(0)
		replayed, err := r.Replay(context.Background(), out.Record, nil)
		if err != nil {
			t.Fatalf("%s: %v (stdout %q)", c.name, err, out.Stdout)
		}
		sameOutput(t, out, replayed)
		if calls.Load() != 0 || made < 3 {
			t.Fatalf("%s: %d tool calls recorded, the replay made %d", c.name, made, calls.Load())
		}
	}
}

// TestReplayRunner replays a record on a Runner made from it (rec.Manifest),
// as spine replay does, with a run's own tools.
func TestReplayRunner(t *testing.T) {
	r := newRunner(t, testManifest(), nil)
	own := Manifest{"ask": {Call: func(context.Context, json.RawMessage) (any, error) { return "yes", nil }, Description: "Ask."}}
	out := recordRun(t, r, Request{Source: `print(ask(q=1), lookup(key="pen"))`, Tools: own})
	if len(out.Record.RunTools) != 1 || out.Stdout != "yes 2\n" {
		t.Fatalf("run tools %+v, stdout %q", out.Record.RunTools, out.Stdout)
	}
	other := newRunner(t, out.Record.Manifest(), nil)
	replayed, err := other.Replay(context.Background(), out.Record, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameOutput(t, out, replayed)
	third := newRunner(t, Manifest{"lookup": testManifest()["lookup"]}, nil)
	if _, err := third.Replay(context.Background(), out.Record, nil); !errors.Is(err, ErrDiverged) || !strings.Contains(err.Error(), "the record has the tool echo") {
		t.Fatalf("other tools: %v", err)
	}
}

// TestRecordBounds: a record past Options.MaxRecord says it is incomplete
// and does not replay; a session's record names the session.
func TestRecordBounds(t *testing.T) {
	r := newRunner(t, testManifest(), &Options{MaxRecord: 4 << 10})
	out, err := r.Run(context.Background(), Request{Source: `import os; print(len(os.urandom(8000)))`, Record: true})
	if err != nil || out.Stdout != "8000\n" {
		t.Fatal(err, out.Stdout)
	}
	if !strings.Contains(out.Record.Incomplete, "4096-byte limit") {
		t.Fatalf("incomplete: %q", out.Record.Incomplete)
	}
	if _, err := r.Replay(context.Background(), out.Record, nil); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("replay of an incomplete record: %v", err)
	}
	s := newSession(t, r)
	step(t, s, "x = 1")
	out, err = s.Run(context.Background(), Request{Source: "x + 1", Record: true})
	if err != nil {
		t.Fatal(err)
	}
	if rs := out.Record.Session; rs == nil || rs.Runs != 1 || rs.ID != s.id || rs.Image != r.guest.Image {
		t.Fatalf("session record: %+v", rs)
	}
	if _, err := r.Replay(context.Background(), out.Record, nil); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "session") {
		t.Fatalf("replay of a session's record: %v", err)
	}
}

// TestRecordSessionClock: a session's recorded run reads the clock its
// other runs read: the monotonic clock never goes back between them.
func TestRecordSessionClock(t *testing.T) {
	r := newRunner(t, testManifest(), nil)
	s := newSession(t, r)
	step(t, s, "import time; t0 = time.monotonic()")
	out, err := s.Run(context.Background(), Request{Source: "t1 = time.monotonic(); t1 >= t0", Record: true})
	if err != nil || string(out.Value) != "true" || len(out.Record.Clock.Mono) != 1 {
		t.Fatalf("recorded run: %v %s %+v", err, out.Value, out.Record.Clock)
	}
	if got := step(t, s, "time.monotonic() >= t1"); got != "true" {
		t.Fatalf("unrecorded run after it: %s", got)
	}
}
