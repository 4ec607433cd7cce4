package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

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
		_, err := r.Run(context.Background(), spine.Request{Stream: io.MultiReader(strings.NewReader("x = 1\n"), spinetest.ErrReader{})})
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
