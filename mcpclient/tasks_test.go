package mcpclient

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestWatchedBody: the tools/list answer is read from a JSON body and from
// an event stream, however the body is cut into reads, and the body passes
// through unchanged.
func TestWatchedBody(t *testing.T) {
	list := `{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a","inputSchema":{}},{"name":"b","execution":{"taskSupport":"required"},"inputSchema":{}},{"name":"c","execution":{"taskSupport":"optional"},"inputSchema":{}}]}}`
	for _, c := range []struct {
		name string
		sse  bool
		body string
	}{
		{"json", false, list},
		{"sse", true, "event: message\nid: 1\ndata: " + list + "\n\n"},
		{"sse crlf", true, "event: message\r\ndata: " + list + "\r\n\r\n"},
	} {
		for _, oneByte := range []bool{false, true} {
			w := newTaskWatch()
			var r io.Reader = strings.NewReader(c.body)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			b := &watchedBody{ReadCloser: io.NopCloser(r), w: w, sse: c.sse}
			got, err := io.ReadAll(b)
			if err != nil || string(got) != c.body {
				t.Fatalf("%s: the body changed: %q %v", c.name, got, err)
			}
			if w.needsTask("a") || !w.needsTask("b") || w.needsTask("c") {
				t.Errorf("%s (one byte %v): needs tasks %v", c.name, oneByte, w.required)
			}
		}
	}
}

// FuzzWatchedBody: what a server sends never makes the watch panic, and the
// body reaches the SDK unchanged.
func FuzzWatchedBody(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"x","execution":{"taskSupport":"required"}}]}}`), false)
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{\"name\":\"x\"}]}}\n\n"), true)
	f.Add([]byte("data: {\"tools\"\ndata: :5}\n\n\n"), true)
	f.Fuzz(func(t *testing.T, body []byte, sse bool) {
		w := newTaskWatch()
		b := &watchedBody{ReadCloser: io.NopCloser(iotest.HalfReader(bytes.NewReader(body))), w: w, sse: sse}
		got, err := io.ReadAll(b)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("the body changed: %q %v", got, err)
		}
		for name := range w.required {
			_ = w.needsTask(name)
		}
	})
}
