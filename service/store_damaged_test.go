package service_test

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// TestStoredSnapshotUnrestorable: a stored snapshot this server cannot
// restore — damaged (truncated, or not a snapshot), or over its snapshot
// cap — is the server's fault: a run or a snapshot of the session is
// answered 500 stored_snapshot, not 400 bad_snapshot, and the session's id
// is logged at ERROR (issue 34.13).
func TestStoredSnapshotUnrestorable(t *testing.T) {
	st := memStore(t)
	var log lockedBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	_, ts := newSessionServer(t, nil, &service.Options{SessionStore: st, Logger: logger, MaxSnapshot: 4 << 20})
	c := client{t: t, url: ts.URL}
	id := c.create()
	c.mustRun(id, "x = 1")
	blob := c.snapshot(id)

	put := func(id string, data []byte) {
		meta := sessionstore.Meta{Generation: 1, Image: runner.ImageKey()}
		if err := st.Put(t.Context(), id, meta, int64(len(data)), func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
			t.Fatal(err)
		}
	}
	put("truncated", blob[:len(blob)/2])
	put("garbage", []byte(strings.Repeat("not a snapshot ", 100)))
	put("oversized", make([]byte, 5<<20))
	for _, id := range []string{"truncated", "garbage", "oversized"} {
		status, out := c.run(id, "1")
		wantError(t, "a run of the "+id+" session", status, out, http.StatusInternalServerError, "stored_snapshot")
		if out.Error != nil && !strings.Contains(out.Error.Message, id) {
			t.Errorf("%s: the message does not name the session: %q", id, out.Error.Message)
		}
		status, raw, _ := c.send("GET", "/v1/sessions/"+id+"/snapshot", "", nil)
		wantError(t, "a snapshot of the "+id+" session", status, c.answer(status, raw), http.StatusInternalServerError, "stored_snapshot")
		if !strings.Contains(log.String(), "level=ERROR msg=\"a stored session's snapshot cannot be restored by this server\" session="+id) {
			t.Errorf("%s: no ERROR line with the session's id in the log:\n%s", id, log.String())
		}
	}
}
