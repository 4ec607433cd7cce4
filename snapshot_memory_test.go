package spine

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/spine-run/spine/internal/heapwatch"
)

// TestSnapshotStreamMemory: snapshotting a session of about 200 MB of
// incompressible data to a file, and restoring it from the file, takes the
// Host's heap up by no more than snapshotStreamMemory (and a margin for the
// rest of the process), not by a multiple of the session.
func TestSnapshotStreamMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("a 200 MB session")
	}
	ctx := context.Background()
	r := newRunner(t, testManifest(), &Options{PoolSize: -1, Sessions: SessionOptions{Idle: -1}})
	s := newSession(t, r)
	const size = 200_000_000
	if got := step(t, s, "import os, hashlib\nbig = os.urandom(200_000_000)\nsum = hashlib.sha256(big).hexdigest()\nlen(big)"); got != "200000000" {
		t.Fatal(got)
	}
	path := filepath.Join(t.TempDir(), "big.snapshot")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	var snapErr error
	took := heapwatch.Run(func() {
		w := bufio.NewWriterSize(f, snapshotChunk)
		n, snapErr = s.SnapshotTo(ctx, w)
		if snapErr == nil {
			snapErr = w.Flush()
		}
	})
	f.Close()
	if snapErr != nil {
		t.Fatal(snapErr)
	}
	if n < size {
		t.Fatalf("a snapshot of %d bytes for %d incompressible ones", n, size)
	}
	const margin = 2 << 20
	t.Logf("snapshot of %d bytes: heap in use +%d bytes at most, %d bytes allocated", n, took.Grew(), took.Allocated)
	if took.Allocated > snapshotStreamMemory+margin {
		t.Errorf("snapshotting allocated %d bytes, over %d + %d", took.Allocated, snapshotStreamMemory, margin)
	}
	s.Close(ctx)

	var restored *Session
	var restoreErr error
	woke := heapwatch.Run(func() {
		f, err := os.Open(path)
		if err != nil {
			restoreErr = err
			return
		}
		defer f.Close()
		restored, restoreErr = r.RestoreFrom(ctx, f)
	})
	if restoreErr != nil {
		t.Fatal(restoreErr)
	}
	t.Cleanup(func() { restored.Close(ctx) })
	t.Logf("restore: heap in use +%d bytes at most, %d bytes allocated", woke.Grew(), woke.Allocated)
	if woke.Allocated > snapshotStreamMemory+margin {
		t.Errorf("restoring allocated %d bytes, over %d + %d", woke.Allocated, snapshotStreamMemory, margin)
	}
	if got := step(t, restored, "hashlib.sha256(big).hexdigest() == sum"); got != "true" {
		t.Fatalf("the restored session's data: %s", got)
	}
}
