package service_test

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// TestStoreSnapshotCap: a run whose snapshot is over Options.MaxSnapshot
// is answered 409 too_large and undone, and the store keeps nothing of
// its snapshot (no generation, no file); a replica whose cap is under a
// stored snapshot refuses to load it (500 stored_snapshot: the server's
// fault, not the request's), and leaves it.
func TestStoreSnapshotCap(t *testing.T) {
	dir := t.TempDir()
	st, err := sessionstore.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	_, ts := newSessionServer(t, nil, &service.Options{SessionStore: st, MaxSnapshot: 1 << 20})
	small := client{t: t, url: ts.URL}
	id := small.create()
	if got := small.mustRun(id, "x = 1\nx"); got != "1" {
		t.Fatal(got)
	}
	status, out := small.run(id, "import os\nblob = os.urandom(3_000_000)\nlen(blob)")
	if status != http.StatusConflict || out.Error == nil || out.Error.Kind != "too_large" || !strings.Contains(out.Error.Message, "over") {
		t.Fatalf("a run past the cap: %d %+v", status, out.Error)
	}
	meta, err := st.Head(context.Background(), id)
	if err != nil || meta.Generation != 2 {
		t.Fatalf("the store after the refused run: %+v %v, want generation 2", meta, err)
	}
	if got := small.mustRun(id, "'blob' in dir(), x"); got != "[false,1]" {
		t.Fatalf("after the refused run: %s, want it undone", got)
	}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".tmp") {
			t.Errorf("the refused write left %s", path)
		}
		return nil
	})

	_, ts2 := newSessionServer(t, nil, &service.Options{SessionStore: st, MaxSnapshot: 8 << 20})
	large := client{t: t, url: ts2.URL}
	if got := large.mustRun(id, "import os\nblob = os.urandom(3_000_000)\nlen(blob)"); got != "3000000" {
		t.Fatal(got)
	}
	status, out = small.run(id, "len(blob)")
	if status != http.StatusInternalServerError || out.Error == nil || out.Error.Kind != "stored_snapshot" {
		t.Fatalf("loading a snapshot over the cap: %d %+v", status, out.Error)
	}
	if got := large.mustRun(id, "len(blob)"); got != "3000000" {
		t.Fatalf("the replica of the larger cap: %s", got)
	}
	if _, err := st.Head(context.Background(), id); errors.Is(err, sessionstore.ErrNotFound) {
		t.Fatal("the refused load took the session from the store")
	}
}
