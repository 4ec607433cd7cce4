package spine

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// heapWatch samples the Go heap while a function runs: the peak of HeapInuse
// over the one before, and the bytes allocated (TotalAlloc), which bounds
// any peak however the samples fall.
type heapWatch struct {
	base, peak uint64
	allocated  uint64
}

func watchHeap(f func()) heapWatch {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w := heapWatch{base: m.HeapInuse, peak: m.HeapInuse}
	total := m.TotalAlloc
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var s runtime.MemStats
		for {
			select {
			case <-stop:
				return
			default:
			}
			runtime.ReadMemStats(&s)
			w.peak = max(w.peak, s.HeapInuse)
			runtime.Gosched()
		}
	}()
	f()
	close(stop)
	wg.Wait()
	runtime.ReadMemStats(&m)
	w.peak = max(w.peak, m.HeapInuse)
	w.allocated = m.TotalAlloc - total
	return w
}

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
	took := watchHeap(func() {
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
	t.Logf("snapshot of %d bytes: heap in use +%d bytes at most, %d bytes allocated", n, took.peak-took.base, took.allocated)
	if took.allocated > snapshotStreamMemory+margin {
		t.Errorf("snapshotting allocated %d bytes, over %d + %d", took.allocated, snapshotStreamMemory, margin)
	}
	s.Close(ctx)

	var restored *Session
	var restoreErr error
	woke := watchHeap(func() {
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
	t.Logf("restore: heap in use +%d bytes at most, %d bytes allocated", woke.peak-woke.base, woke.allocated)
	if woke.allocated > snapshotStreamMemory+margin {
		t.Errorf("restoring allocated %d bytes, over %d + %d", woke.allocated, snapshotStreamMemory, margin)
	}
	if got := step(t, restored, "hashlib.sha256(big).hexdigest() == sum"); got != "true" {
		t.Fatalf("the restored session's data: %s", got)
	}
}
