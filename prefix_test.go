package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// chunkReader delivers a program in random chunks of 1 to max bytes, the way
// an LLM's tokens arrive (a UTF-8 character may be split).
type chunkReader struct {
	data []byte
	rng  *rand.Rand
	max  int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+c.rng.IntN(c.max), len(c.data), len(p))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// TestDifferentialPrefixMode: the generated programs of the differential test,
// streamed in random chunkings, end exactly as they do with early reads off.
func TestDifferentialPrefixMode(t *testing.T) {
	n := 100
	if !testing.Short() {
		n = 300
	}
	programs := differentialPrograms(20261130, n)
	runners := map[int]*spine.Runner{0: spinetest.NewRunner(t, differentialManifest(), nil)}
	for _, p := range programs {
		if _, ok := runners[p.Budget]; !ok {
			runners[p.Budget] = spinetest.NewRunner(t, differentialManifest(), &spine.Options{MaxToolCalls: p.Budget})
		}
	}
	var mu sync.Mutex
	failures, early := 0, 0
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := range work {
				p := programs[i]
				rng := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				off := differentialRun(runners[p.Budget], p, false)
				stream := &chunkReader{data: []byte(p.Source), rng: rng, max: 1 + rng.IntN(40)}
				on := differentialRunRequest(runners[p.Budget], spine.Request{Stream: stream, Inputs: p.Inputs})
				mu.Lock()
				early += on.earlyStarts
				if strings.HasPrefix(off.Error, "not a Python error") || !differentialEqual(off, on) {
					failures++
					if failures <= 5 {
						inputs, _ := json.Marshal(p.Inputs)
						t.Errorf("program %d (budget %d, inputs %s):\n%s\n--- early reads off:\n%s\n--- prefix mode:\n%s",
							i, p.Budget, inputs, p.Source, off, on)
					}
				}
				mu.Unlock()
			}
		}(w)
	}
	for i := range programs {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d programs; early-read tool runs in prefix mode: %d", len(programs), early)
	if failures > 0 {
		t.Fatalf("%d of %d programs differ", failures, len(programs))
	}
	if early == 0 {
		t.Fatal("prefix mode started no early read in the whole corpus")
	}
}

// TestPrefixStartsReadsWhileStreaming writes a program statement by statement
// and waits, before writing the rest, until the read of a complete statement
// has started: only prefix mode can start it then.
func TestPrefixStartsReadsWhileStreaming(t *testing.T) {
	started := make(chan string, 4)
	r := spinetest.NewRunner(t, spine.Manifest{
		"slow": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			started <- string(args)
			return "v" + string(args), nil
		}, AllowEarlyRead: true},
	}, nil)
	pr, pw := io.Pipe()
	type result struct {
		out *spine.Output
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := r.Run(context.Background(), spine.Request{Stream: pr, Inputs: map[string]any{"k": "b"}})
		done <- result{out, err}
	}()
	io.WriteString(pw, "a = slow(key=\"a\")\n")
	io.WriteString(pw, "b = slow(key=inputs[\"k\"])\nx = 1\n") // a later line completes the statement before it
	for want := 2; want > 0; want-- {
		select {
		case <-started:
		case res := <-done:
			t.Fatalf("the run ended before the stream did: %v", res.err)
		}
	}
	io.WriteString(pw, "result = [a, b, x]\n")
	pw.Close()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if string(res.out.Value) != `["v{\"key\":\"a\"}","v{\"key\":\"b\"}",1]` || res.out.ToolCalls != 2 {
		t.Fatalf("value %s, %d tool calls", res.out.Value, res.out.ToolCalls)
	}
	select {
	case args := <-started:
		t.Fatalf("a read ran twice: %s", args)
	default:
	}
}

func TestPrefixErrors(t *testing.T) {
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{MaxSource: 64})
	t.Run("source and stream", func(t *testing.T) {
		if _, err := r.Run(context.Background(), spine.Request{Source: "1", Stream: strings.NewReader("2")}); err == nil {
			t.Fatal("accepted both")
		}
	})
	t.Run("too large", func(t *testing.T) {
		_, err := r.Run(context.Background(), spine.Request{Stream: strings.NewReader(strings.Repeat("#\n", 100))})
		if !errors.Is(err, spine.ErrTooLarge) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("cancel while waiting for the stream", func(t *testing.T) {
		pr, pw := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := r.Run(ctx, spine.Request{Stream: pr})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		// The stream is closed in the background: a Read already waiting may
		// take one more write, then writing fails.
		closed := false
		for i := 0; i < 3 && !closed; i++ {
			_, err := pw.Write([]byte("x"))
			closed = err != nil
		}
		if !closed {
			t.Fatal("the stream was not closed")
		}
	})
	t.Run("cancelled before the stream is read", func(t *testing.T) {
		pr, pw := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := r.Run(ctx, spine.Request{Stream: pr}); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		// Nothing ever read it: the close is what ends this Write.
		if _, err := pw.Write([]byte("x")); err == nil {
			t.Fatal("the stream was not closed")
		}
	})
	t.Run("read error", func(t *testing.T) {
		_, err := r.Run(context.Background(), spine.Request{Stream: io.MultiReader(strings.NewReader("x = 1\n"), errReader{})})
		if err == nil || !strings.Contains(err.Error(), "reading the program: connection reset") || errors.Is(err, spine.ErrGuest) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("syntax error", func(t *testing.T) {
		_, err := r.Run(context.Background(), spine.Request{Stream: strings.NewReader("x = (\n")})
		if pe := spinetest.PythonError(t, err); pe.Type != "SyntaxError" {
			t.Fatalf("got %#v", pe)
		}
	})
	// The Runner keeps working.
	out := spinetest.MustRun(t, r, spine.Request{Source: `lookup(key="book")`})
	if string(out.Value) != "21" {
		t.Fatalf("value %s", out.Value)
	}
}

// errReader is a stream that fails with errConnectionReset.
type errReader struct{}

var errConnectionReset = errors.New("connection reset")

func (errReader) Read([]byte) (int, error) { return 0, errConnectionReset }

func TestTransformed(t *testing.T) {
	r := shared(t)
	out, err := r.Run(context.Background(), spine.Request{
		Source:      "a = lookup(key=\"book\")\nb = lookup(key=\"pen\")\nresult = a + b\n",
		EarlyReads:  true,
		Transformed: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != "23" || !strings.Contains(out.Transformed, "__spine_prepare") {
		t.Fatalf("value %s, transformed:\n%s", out.Value, out.Transformed)
	}
	out = spinetest.MustRun(t, r, spine.Request{Source: "1"})
	if out.Transformed != "" {
		t.Fatalf("transformed without asking: %q", out.Transformed)
	}
}
