package wasmtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spine-run/spine/internal/warmup"
)

// testCache keeps the compiled Guest between test processes, as the core's
// cache folder does: compiling it takes a while.
func testCache(t testing.TB) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return t.TempDir()
	}
	return filepath.Join(dir, "spine", "wasmtime")
}

// lookupTools is the Guest's form of the seed's lookup tool, as the
// Runner installs it (encodeGuestTools).
const lookupTools = `[{"name":"lookup","early":true,"sig":"def lookup(**kwargs) -> Any:","doc":"Look up the price of an item by key."}]`

// request is an execute request of source, with the tools when tools is
// set (the warm-up installs them; a run's request leaves them out).
func request(source string, tools bool) []byte {
	r := map[string]any{"source": source, "inputs": map[string]any{"quantity": 3}, "early_reads": false, "result_limit": 1 << 20}
	if tools {
		r["tools"] = json.RawMessage(lookupTools)
	}
	b, _ := json.Marshal(r)
	return b
}

// onCall is what the test Engine's tool calls do; nil answers 21.
var onCall atomic.Pointer[func(ctx context.Context)]

func testCall(ctx context.Context, req []byte) []byte {
	if f := onCall.Load(); f != nil {
		(*f)(ctx)
	}
	return []byte(`{"value":21}`)
}

var (
	sharedOnce   sync.Once
	sharedEngine *Engine
	sharedErr    error
)

// testEngine is one Engine for the package's tests.
func testEngine(t testing.TB) *Engine {
	sharedOnce.Do(func() {
		sharedEngine, sharedErr = New(context.Background(), Config{CacheDir: testCache(t), Warm: request(warmup.Source, true), Call: testCall})
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedEngine
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, e := range []*Engine{sharedEngine, dataEngine} {
		if e != nil {
			e.Close()
		}
	}
	os.Exit(code)
}

func run(t *testing.T, g *Guest, source string) map[string]any {
	t.Helper()
	out, err := g.Execute(context.Background(), request(source, false))
	if err != nil {
		t.Fatal(err)
	}
	var resp map[string]any
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("response %q: %v", out, err)
	}
	return resp
}

func TestRunAndOutput(t *testing.T) {
	g, err := testEngine(t).NewGuest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	resp := run(t, g, "import sys\nprint('hello')\nprint('oops', file=sys.stderr)\n6 * 7")
	if v, _ := resp["value"].(float64); v != 42 {
		t.Fatalf("response %v, want the value 42", resp)
	}
	if stdout, stderr := g.Output(); stdout != "hello\n" || stderr != "oops\n" {
		t.Fatalf("stdout %q, stderr %q", stdout, stderr)
	}
}

func newGuest(t *testing.T) *Guest {
	t.Helper()
	g, err := testEngine(t).NewGuest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

func TestToolCall(t *testing.T) {
	g := newGuest(t)
	resp := run(t, g, "price = lookup(key='book')\nresult = price * inputs['quantity']\n")
	if v, _ := resp["value"].(float64); v != 63 {
		t.Fatalf("response %v, want the value 63", resp)
	}
}

// TestResetForgets: what a run changes in the Guest's modules and writes to
// its scratch folder is gone after Reset, and only then.
func TestResetForgets(t *testing.T) {
	g := newGuest(t)
	const change = "import json\njson.spine_mark = 1\nopen('/note.txt', 'w').write('x')\n"
	const look = "import json, os\n[hasattr(json, 'spine_mark'), os.path.exists('/note.txt')]"
	run(t, g, change)
	if resp := run(t, g, look); fmt.Sprint(resp["value"]) != "[true true]" {
		t.Fatalf("without a reset the run saw %v, want both changes", resp["value"])
	}
	if err := g.Reset(); err != nil {
		t.Fatal(err)
	}
	if resp := run(t, g, look); fmt.Sprint(resp["value"]) != "[false false]" {
		t.Fatalf("after the reset the run saw %v, want neither change", resp["value"])
	}
}

// TestStop: a run whose context ends in the middle of an endless loop is
// stopped at its next tick, and its Guest is not reused.
func TestStop(t *testing.T) {
	g := newGuest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := func(context.Context) { cancel() }
	onCall.Store(&stop)
	defer onCall.Store(nil)
	_, err := g.Execute(ctx, request("lookup(key='book')\nwhile True:\n    pass\n", false))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute: %v, want context.Canceled", err)
	}
	if err := g.Reset(); !errors.Is(err, ErrNotReusable) {
		t.Fatalf("Reset after a stop: %v, want ErrNotReusable", err)
	}
}

// TestMemoryLimit: past the Engine's memory limit the program gets
// MemoryError, and the Guest, its memory grown past the image, is not reused.
func TestMemoryLimit(t *testing.T) {
	g := newGuest(t)
	resp := run(t, g, "chunks = []\ntry:\n    while True:\n        chunks.append(bytearray(16 << 20))\nexcept MemoryError:\n    n = len(chunks)\nn * 16")
	mib, _ := resp["value"].(float64)
	if mib < 128 || mib > 256 {
		t.Fatalf("response %v, want about 256 MiB allocated before MemoryError", resp)
	}
	if err := g.Reset(); !errors.Is(err, ErrNotReusable) {
		t.Fatalf("Reset after the memory grew: %v, want ErrNotReusable", err)
	}
}

// TestStdioClosed: a run that closes its stdout leaves a Guest that is not
// reused.
func TestStdioClosed(t *testing.T) {
	g := newGuest(t)
	run(t, g, "import os\nos.close(1)")
	if err := g.Reset(); !errors.Is(err, ErrNotReusable) {
		t.Fatalf("Reset after closing stdout: %v, want ErrNotReusable", err)
	}
}

// TestSleepEndsWithTheRun: a run whose context ends while it sleeps stops
// then, not when the sleep would have ended; a sleep in a run that goes on
// returns as it should.
func TestSleepEndsWithTheRun(t *testing.T) {
	g := newGuest(t)
	resp := run(t, g, "import time\ntime.sleep(0.001)\n'awake'")
	if resp["value"] != "awake" {
		t.Fatalf("response %v, want the value 'awake'", resp)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := func(context.Context) { cancel() }
	onCall.Store(&stop)
	defer onCall.Store(nil)
	_, err := g.Execute(ctx, request("import time\nlookup(key='book')\ntime.sleep(3600)\n", false))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute: %v, want context.Canceled", err)
	}
}

// TestImageSameOnEveryHost: two Engines make the same image: CPython's hash
// secret, drawn as it starts, is the same in both (the image is captured
// with fixed randomness), while a run's own randomness is not.
func TestImageSameOnEveryHost(t *testing.T) {
	other, err := New(context.Background(), Config{CacheDir: testCache(t), Warm: request(warmup.Source, true)})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	g2, err := other.NewGuest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	g := newGuest(t)
	const probe = "import os\n[hash('spine'), os.urandom(8).hex()]"
	a, b := run(t, g, probe)["value"].([]any), run(t, g2, probe)["value"].([]any)
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("values %v and %v", a, b)
	}
	if a[0] != b[0] {
		t.Errorf("hash('spine') is %v in one Engine's image and %v in the other's", a[0], b[0])
	}
	if a[1] == b[1] {
		t.Errorf("both runs drew the same random bytes %v", a[1])
	}
}

// TestFilesHeldOpen: a Guest whose run leaves a file open is not reset (its
// descriptor would outlive the reset); one whose run closed its files is.
func TestFilesHeldOpen(t *testing.T) {
	g := newGuest(t)
	run(t, g, "with open('/a.txt', 'w') as f:\n    f.write('x')\n")
	if err := g.Reset(); err != nil {
		t.Fatalf("Reset after files closed: %v", err)
	}
	run(t, g, "import builtins\nbuiltins.kept = open('/a.txt', 'w')\n")
	if err := g.Reset(); !errors.Is(err, ErrNotReusable) {
		t.Fatalf("Reset with a file held open: %v, want ErrNotReusable", err)
	}
}

// TestDescriptorLimit: a run may hold MaxDescriptors files open, no more
// (EMFILE), and once it closes them the Guest is reset as usual.
func TestDescriptorLimit(t *testing.T) {
	g := newGuest(t)
	resp := run(t, g, `import errno
files, err = [], None
try:
    for i in range(100):
        files.append(open(f'/f{i}', 'w'))
except OSError as e:
    err = errno.errorcode[e.errno]
for f in files:
    f.close()
[len(files), err]`)
	if fmt.Sprint(resp["value"]) != "[64 EMFILE]" {
		t.Fatalf("response %v, want 64 files open and then EMFILE", resp)
	}
	if err := g.Reset(); err != nil {
		t.Fatal(err)
	}
}

// TestCaptureCut: a capture keeps max bytes, cut at a rune's start, and
// nothing after the cut.
func TestCaptureCut(t *testing.T) {
	c := capture{max: 5}
	c.write([]byte("abcd"))
	c.write([]byte("é and more"))
	c.write([]byte("x"))
	if c.String() != "abcd" || !c.truncated {
		t.Fatalf("capture %q (truncated %v), want \"abcd\" cut", c.String(), c.truncated)
	}
	c.reset()
	c.write([]byte("ok"))
	if c.String() != "ok" || c.truncated {
		t.Fatalf("after reset: %q (truncated %v)", c.String(), c.truncated)
	}
}
