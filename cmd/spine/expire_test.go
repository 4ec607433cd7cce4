package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spine-run/spine/internal/storetest"
	"github.com/spine-run/spine/sessionstore"
)

// TestExpirePausedRuns: a sweep of --session-dir's store removes the
// paused runs kept there unwritten for the runs' TTL (here a tombstone and
// a run kept for a continuation that never came), and leaves one written
// since.
func TestExpirePausedRuns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sessionstore.Open(ctx, "file://"+filepath.ToSlash(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	runs := sessionstore.Runs(st)
	for _, id := range []string{"old", "ended", "new"} {
		if err := storetest.PutBytes(ctx, runs, id, []byte("a paused run"), sessionstore.Meta{Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := runs.Delete(ctx, "ended"); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-3 * time.Hour)
	for _, id := range []string{"old", "ended"} {
		filepath.WalkDir(filepath.Join(dir, "runs", id), func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				os.Chtimes(path, old, old)
			}
			return nil
		})
	}
	if _, err := expireOnce(ctx, st, time.Hour, 2*time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"old": false, "ended": false, "new": true} {
		_, err := os.Stat(filepath.Join(dir, "runs", id))
		if gone := errors.Is(err, fs.ErrNotExist); gone == want {
			t.Errorf("runs/%s: kept %v, want %v (%v)", id, !gone, want, err)
		}
	}
}
