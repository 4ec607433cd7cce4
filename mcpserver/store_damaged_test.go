package mcpserver_test

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
	"github.com/spine-run/spine/sessionstore"
)

// syncBuffer is a log's text, written by the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStoredSnapshotUnrestorable: an MCP session whose stored snapshot the
// server cannot restore (damaged) is the server's fault: the call gets a
// JSON-RPC error, not a tool error telling the client to start afresh,
// and the server's log has the session's id at ERROR; fresh=true still
// starts it anew (issue 34.13).
func TestStoredSnapshotUnrestorable(t *testing.T) {
	st, err := sessionstore.Open(t.Context(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const id = "damaged-session"
	garbage := []byte(strings.Repeat("not a snapshot ", 100))
	meta := sessionstore.Meta{Generation: 1, Image: runner.ImageKey()}
	if err := st.Put(t.Context(), id, meta, 1<<20, func(w io.Writer) error { _, err := w.Write(garbage); return err }); err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	server := mcpserver.NewServer(runner, &mcpserver.Options{Store: st, ServerLog: slog.New(slog.NewTextHandler(&log, nil))})
	t.Cleanup(func() { server.Close(t.Context()) })
	url := spinetest.ServeHTTP(t, server.HTTPHandler(nil)).URL
	cs := spinetest.NewRouter(t, url, "", id).Connect(t)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: source("1")})
	if err == nil || !strings.Contains(err.Error(), "stored snapshot of session "+id) {
		t.Fatalf("a call of the damaged session: err %v, result %s; want a JSON-RPC error naming its stored snapshot", err, spinetest.Text(res))
	}
	if !strings.Contains(log.String(), "level=ERROR msg=\"a stored session's snapshot cannot be restored by this server\" session="+id) {
		t.Errorf("no ERROR line with the session's id in the log:\n%s", log.String())
	}
	if got := value(t, cs, map[string]any{"source": "2", "fresh": true}); got != "2" {
		t.Errorf("fresh=true: %s", got)
	}
}
