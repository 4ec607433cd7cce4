package spine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// watchWriter keeps what it is given and closes seen once it holds want.
type watchWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newWatchWriter(want string) *watchWriter {
	return &watchWriter{want: want, seen: make(chan struct{})}
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// gateManifest has the tool gate, which returns only once the test's writers
// have seen what the program printed before calling it: the output arrived
// while the program ran.
func gateManifest(stdout, stderr *watchWriter) spine.Manifest {
	return spine.Manifest{"gate": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
		for _, w := range []*watchWriter{stdout, stderr} {
			select {
			case <-w.seen:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return "open", nil
	}}}
}

const gateSource = `import sys
print("first")
print("first on stderr", file=sys.stderr)
result = gate()
print("second")
`

func TestOutputAsItHappens(t *testing.T) {
	stdout, stderr := newWatchWriter("first\n"), newWatchWriter("first on stderr\n")
	r := spinetest.NewRunner(t, gateManifest(stdout, stderr), nil)
	out, err := r.Run(context.Background(), spine.Request{Source: gateSource, Stdout: stdout, Stderr: stderr})
	if err != nil {
		t.Fatal(err)
	}
	// Everything reached the writers before Run returned, and the capture
	// stays.
	if stdout.String() != "first\nsecond\n" || stderr.String() != "first on stderr\n" {
		t.Fatalf("writers got %q and %q", stdout.String(), stderr.String())
	}
	if out.Stdout != "first\nsecond\n" || out.Stderr != "first on stderr\n" || string(out.Value) != `"open"` {
		t.Fatalf("output %+v", out)
	}
}

func TestOutputAsItHappensInSession(t *testing.T) {
	stdout, stderr := newWatchWriter("first\n"), newWatchWriter("first on stderr\n")
	r := spinetest.NewRunner(t, gateManifest(stdout, stderr), nil)
	s, err := r.NewSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Run(context.Background(), spine.Request{Source: "n = 1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(context.Background(), spine.Request{Source: gateSource + "print(n)\n", Stdout: stdout, Stderr: stderr}); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "first\nsecond\n1\n" {
		t.Fatalf("stdout %q", stdout.String())
	}
	// The next run without writers forwards nothing.
	if _, err := s.Run(context.Background(), spine.Request{Source: `print("later")`}); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "first\nsecond\n1\n" {
		t.Fatalf("stdout %q", stdout.String())
	}
}

// TestOutputAllForwarded: forwarding is not cut by MaxOutput, which caps the
// capture; a program that writes faster than its writer waits for it.
func TestOutputAllForwarded(t *testing.T) {
	r := spinetest.NewRunner(t, nil, &spine.Options{MaxOutput: 1000})
	var w bytes.Buffer
	out, err := r.Run(context.Background(), spine.Request{Source: `for i in range(20000): print("x" * 20)`, Stdout: &w})
	if err != nil {
		t.Fatal(err)
	}
	if w.Len() != 20000*21 || len(out.Stdout) != 1000 || !out.StdoutTruncated {
		t.Fatalf("forwarded %d bytes, captured %d (truncated %v)", w.Len(), len(out.Stdout), out.StdoutTruncated)
	}
}

type failingWriter struct {
	mu     sync.Mutex
	writes int
}

func (f *failingWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	return 0, errors.New("disk full")
}

// TestOutputWriterFails: a writer's error stops forwarding to it; the run
// and its capture go on.
func TestOutputWriterFails(t *testing.T) {
	stderr := newWatchWriter("")
	f := &failingWriter{}
	r := spinetest.NewRunner(t, nil, nil)
	out, err := r.Run(context.Background(), spine.Request{Source: `for i in range(100): print(i)`, Stdout: f, Stderr: stderr})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out.Stdout, "98\n99\n") || f.writes != 1 {
		t.Fatalf("captured %q; the writer was called %d times", out.Stdout, f.writes)
	}
}

// blockingWriter blocks every Write until release is closed, and says so.
type blockingWriter struct {
	blocked, release, returned chan struct{}
	once                       sync.Once
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.blocked) })
	<-b.release
	defer func() { b.returned <- struct{}{} }()
	return len(p), nil
}

// TestOutputWriterBlocks: a writer that never returns holds up neither the
// program past its ctx nor Run: ctx ending stops both.
func TestOutputWriterBlocks(t *testing.T) {
	b := &blockingWriter{blocked: make(chan struct{}), release: make(chan struct{}), returned: make(chan struct{}, 1)}
	r := spinetest.NewRunner(t, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-b.blocked; cancel() }()
	// The program writes far more than the forwarder holds: it waits for
	// the writer until ctx ends.
	out, err := r.Run(ctx, spine.Request{Source: `while True: print("x" * 1000)`, Stdout: b})
	if !errors.Is(err, context.Canceled) || out == nil || out.Stdout == "" {
		t.Fatalf("err %v", err)
	}
	// The Write in progress returns once the writer lets it; no other starts.
	close(b.release)
	<-b.returned
}
