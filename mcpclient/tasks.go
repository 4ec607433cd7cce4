package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tool whose execution.taskSupport is "required" can only be called as an
// MCP task (the call returns a task to poll, not a result), which Spine's
// calls are not: listing it would offer the program a tool that always
// fails. The SDK's Tool has no execution field, so the tools/list answers
// are read as they arrive, before the SDK decodes them: a wrapped
// connection for stdio and SSE, and for streamable HTTP (whose connection
// cannot be wrapped without losing what the SDK tells it of the session) a
// wrapped HTTP transport that reads the response bodies as they stream by.

// The same reading keeps what the SDK's decoding loses of the order of
// object keys: each tool's schemas as the server wrote them (order.go), and
// the structured results of recent calls.

// taskWatch records, by MCP name, the tools listed as needing tasks and
// their schemas as written, and the recent structured results as written.
type taskWatch struct {
	mu       sync.Mutex
	required map[string]bool
	schemas  map[string]toolSchemas
	results  recentResults
}

func newTaskWatch() *taskWatch {
	return &taskWatch{required: map[string]bool{}, schemas: map[string]toolSchemas{}}
}

// needsTask says whether the tool name was listed as needing tasks.
func (w *taskWatch) needsTask(name string) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.required[name]
}

// message reads one JSON-RPC message as the server sent it.
func (w *taskWatch) message(data []byte) {
	if !bytes.Contains(data, []byte(`"tools"`)) && !bytes.Contains(data, []byte(`"structuredContent"`)) {
		return
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return // the SDK will say what is wrong with it
	}
	if resp, ok := msg.(*jsonrpc.Response); ok {
		w.result(resp.Result)
	}
}

// result reads a response's result; one that is not a tools/list answer
// has no "tools" array of objects with names and changes nothing.
func (w *taskWatch) result(result json.RawMessage) {
	if bytes.Contains(result, []byte(`"structuredContent"`)) {
		w.structured(result)
	}
	if !bytes.Contains(result, []byte(`"tools"`)) {
		return
	}
	var list struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution *struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		} `json:"tools"`
	}
	if json.Unmarshal(result, &list) != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range list.Tools {
		if t.Name != "" {
			w.required[t.Name] = t.Execution != nil && t.Execution.TaskSupport == "required"
			w.schemas[t.Name] = toolSchemas{input: t.InputSchema, output: t.OutputSchema}
		}
	}
}

// watch returns transport, wrapped so that w sees its tools/list answers.
func (w *taskWatch) watch(transport mcp.Transport) mcp.Transport {
	if st, ok := transport.(*mcp.StreamableClientTransport); ok {
		wrapped := *st
		client := http.DefaultClient
		if st.HTTPClient != nil {
			client = st.HTTPClient
		}
		c := *client
		base := c.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		c.Transport = watchedRoundTripper{base, w}
		wrapped.HTTPClient = &c
		return &wrapped
	}
	return watchedTransport{transport, w}
}

type watchedTransport struct {
	mcp.Transport
	w *taskWatch
}

func (t watchedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return watchedConn{conn, t.w}, nil
}

type watchedConn struct {
	mcp.Connection
	w *taskWatch
}

func (c watchedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if resp, ok := msg.(*jsonrpc.Response); ok && err == nil {
		c.w.result(resp.Result)
	}
	return msg, err
}

type watchedRoundTripper struct {
	base http.RoundTripper
	w    *taskWatch
}

func (rt watchedRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost || resp.Body == nil {
		return resp, err
	}
	kind, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch kind {
	case "application/json":
		resp.Body = &watchedBody{ReadCloser: resp.Body, w: rt.w}
	case "text/event-stream":
		resp.Body = &watchedBody{ReadCloser: resp.Body, w: rt.w, sse: true}
	}
	return resp, nil
}

// maxWatched bounds what a watched body keeps of one message; a larger one
// is not read for tools (the SDK has its own limits).
const maxWatched = 16 << 20

// watchedBody passes a response body through, and hands each JSON-RPC
// message in it to the watch as soon as the message is complete: a JSON
// body at its end, an event stream at each event's end.
type watchedBody struct {
	io.ReadCloser
	w        *taskWatch
	sse      bool
	line     []byte // SSE: the line being read
	data     []byte // SSE: the event's data; JSON: the body so far
	overflow bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.sse {
		for _, c := range p[:n] {
			if c != '\n' {
				b.line = append(b.line, c)
				if len(b.line) > maxWatched {
					b.line, b.overflow = b.line[:0], true
				}
				continue
			}
			b.sseLine(bytes.TrimSuffix(b.line, []byte("\r")))
			b.line = b.line[:0]
		}
	} else if !b.overflow {
		b.data = append(b.data, p[:n]...)
		if len(b.data) > maxWatched {
			b.data, b.overflow = nil, true
		}
		if err == io.EOF && !b.overflow {
			b.w.message(b.data)
			b.data = nil
		}
	}
	return n, err
}

func (b *watchedBody) sseLine(line []byte) {
	switch {
	case len(line) == 0: // the event's end
		if len(b.data) > 0 && !b.overflow {
			b.w.message(b.data)
		}
		b.data, b.overflow = b.data[:0], false
	case bytes.HasPrefix(line, []byte("data:")):
		d := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
		if len(b.data) > 0 {
			b.data = append(b.data, '\n')
		}
		b.data = append(b.data, d...)
		if len(b.data) > maxWatched {
			b.data, b.overflow = b.data[:0], true
		}
	}
}
