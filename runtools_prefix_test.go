package spine

import (
	"context"
	"encoding/json"
	"io"
	"testing"
)

// TestRunToolsPrefixPositional: prefix mode starts the early read of a
// run's own tool called with positional arguments as soon as its statement
// is complete, while the program still streams in (the reader names them
// as the tool's proxy, installed only when the run executes, will), and the
// program claims it. The tool's answer waits for the test (a gate), so the
// read is proved to have started before the stream ended.
func TestRunToolsPrefixPositional(t *testing.T) {
	r := newRunner(t, Manifest{}, nil)
	started := make(chan string, 4)
	release := make(chan struct{})
	spec := ToolSpec{
		Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			started <- string(args)
			select {
			case <-release:
				return 20, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
		AllowEarlyRead: true,
		InputSchema:    json.RawMessage(`{"type": "object", "properties": {"item": {"type": "string"}, "n": {"type": "integer"}}, "required": ["item"]}`),
	}
	pr, pw := io.Pipe()
	type result struct {
		out *Output
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := r.Run(context.Background(), Request{Stream: pr, Tools: Manifest{"shop.price": spec}})
		done <- result{out, err}
	}()
	if _, err := io.WriteString(pw, "p = shop.price('book', 2)\nprint('more')\n"); err != nil {
		t.Fatal(err)
	}
	if args := <-started; args != `{"item":"book","n":2}` {
		t.Fatalf("early read with %s", args)
	}
	close(release)
	io.WriteString(pw, "p + 1\n")
	pw.Close()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if string(res.out.Value) != "21" || len(res.out.Calls) != 1 || !res.out.Calls[0].Early {
		t.Fatalf("value %s, calls %+v", res.out.Value, res.out.Calls)
	}
}
