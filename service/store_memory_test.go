package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// heapWatch samples the Go heap while a function runs: the peak of HeapInuse
// over the one before, and the bytes allocated (TotalAlloc), which bounds
// any peak however the samples fall. rss is the process's peak resident
// memory (VmHWM, reset before) over its resident memory before, in bytes,
// where Linux tells them.
type heapWatch struct {
	base, peak, allocated uint64
	rss                   int64
}

func watchHeap(f func()) heapWatch {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w := heapWatch{base: m.HeapInuse, peak: m.HeapInuse}
	total := m.TotalAlloc
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // VmHWM := VmRSS
	rssBefore := procStatus("VmRSS")
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
	if rssBefore > 0 {
		w.rss = procStatus("VmHWM") - rssBefore
	}
	return w
}

// procStatus is a "kB" line of /proc/self/status, in bytes; 0 if there is
// none.
func procStatus(name string) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (w heapWatch) String() string {
	return fmt.Sprintf("heap in use +%.1f MiB at most, %.1f MiB allocated, peak RSS +%.1f MiB", mib(w.peak-w.base), mib(w.allocated), float64(w.rss)/(1<<20))
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// TestStoreStreamMemory: a session of about 200 MB of incompressible data is
// written to a real store after its run (WriteRun), and another replica
// loads it from there, state and all; each takes the Host's heap up by no
// more than service.StreamMemory and a margin for the request around it,
// not by a multiple of the session. Through a file:// store, and through a
// real S3-compatible server when SPINE_FLEET_VERSITYGW names versitygw's
// binary (make fleet-test builds it into build/bin).
func TestStoreStreamMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("a 200 MB session")
	}
	urls := map[string]string{"file": "file://" + t.TempDir()}
	if url, ok := spinetest.S3Server(t); ok {
		urls["s3"] = url
	} else {
		t.Log("SPINE_FLEET_VERSITYGW is not set: no S3-compatible server")
	}
	r := spinetest.NewRunner(t, tools.Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Idle: -1}})
	// A Runner that hibernates its sessions to a directory, to make room
	// for another live one, and hands each to its Server's store.
	var hibernating *service.Server
	rh := spinetest.NewRunner(t, tools.Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{
		Idle: -1, MaxLive: 1, Dir: t.TempDir(),
		OnHibernate: func(s *spine.Session, snapshot io.Reader) { hibernating.Hibernated(s, snapshot) },
	}})
	for _, name := range []string{"file", "s3"} {
		url, ok := urls[name]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			st, err := sessionstore.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			storeStreamMemory(t, r, st)
			hibernateStreamMemory(t, rh, st, &hibernating)
		})
	}
}

// storeStreamMemory is TestStoreStreamMemory with one store.
func storeStreamMemory(t *testing.T, r *spine.Runner, st sessionstore.Store) {
	const margin = 4 << 20 // the request around the write or the load
	limit := uint64(service.StreamMemory + margin)
	svc, ts := newSessionServer(t, r, &service.Options{SessionStore: st})
	one := client{t: t, url: ts.URL}
	id := one.create()
	if got := one.mustRun(id, "import os, hashlib\nbig = os.urandom(200_000_000)\nsum = hashlib.sha256(big).hexdigest()\nlen(big)"); got != "200000000" {
		t.Fatal(got)
	}
	// A second run changes next to nothing, and its write stores the whole
	// session again: what it takes beyond the first is the write's.
	var got string
	wrote := watchHeap(func() {
		got = one.mustRun(id, "n = len(big)\nn")
	})
	if got != "200000000" {
		t.Fatal(got)
	}
	rd, meta, err := st.Get(t.Context(), id, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	size, err := io.Copy(io.Discard, rd)
	rd.Close()
	if err != nil || size < 200_000_000 {
		t.Fatalf("the stored snapshot: %d bytes, %v", size, err)
	}
	t.Logf("a run in a session of 200 MB and its write to the store (generation %d, %d bytes): %v", meta.Generation, size, wrote)
	if wrote.peak-wrote.base > limit {
		t.Errorf("the run and its write took the heap up %d bytes, over StreamMemory %d + %d", wrote.peak-wrote.base, service.StreamMemory, margin)
	}
	if err := svc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The second replica writes on hibernate only: the run that loads the
	// session writes nothing, and what is measured is the load.
	_, ts2 := newSessionServer(t, r, &service.Options{SessionStore: st, SessionWrite: service.WriteHibernate})
	two := client{t: t, url: ts2.URL}
	loaded := watchHeap(func() {
		got = two.mustRun(id, "len(big)")
	})
	if got != "200000000" {
		t.Fatalf("the loaded session: %s", got)
	}
	t.Logf("a run that loaded the session from the store: %v", loaded)
	if loaded.peak-loaded.base > limit {
		t.Errorf("loading took the heap up %d bytes, over StreamMemory %d + %d", loaded.peak-loaded.base, service.StreamMemory, margin)
	}
	if got := two.mustRun(id, "hashlib.sha256(big).hexdigest() == sum"); got != "true" {
		t.Fatalf("the loaded session's data: %s", got)
	}
}

// hibernateStreamMemory: a session of 200 MB that its Runner hibernates to
// make room for another is written to the store (WriteHibernate) within
// StreamMemory and a margin for the new session's making. It sets the
// Server in *hibernating, whose Hibernated the Runner calls.
func hibernateStreamMemory(t *testing.T, r *spine.Runner, st sessionstore.Store, hibernating **service.Server) {
	const margin = 4 << 20
	svc := service.New(r, &service.Options{SessionStore: st, SessionWrite: service.WriteHibernate})
	*hibernating = svc
	ts := spinetest.ServeHTTP(t, svc)
	t.Cleanup(func() { svc.Close(context.Background()) })
	c := client{t: t, url: ts.URL}
	id := c.create()
	if got := c.mustRun(id, "import os\nbig = os.urandom(200_000_000)\nlen(big)"); got != "200000000" {
		t.Fatal(got)
	}
	if _, err := st.Head(t.Context(), id); !errors.Is(err, sessionstore.ErrNotFound) {
		t.Fatalf("before its hibernation, the store has the session: %v", err)
	}
	var other string
	slept := watchHeap(func() { other = c.create() })
	meta, err := st.Head(t.Context(), id)
	if err != nil {
		t.Fatalf("the hibernated session is not in the store: %v", err)
	}
	t.Logf("a new session that made the session of 200 MB hibernate, and its write to the store (generation %d): %v", meta.Generation, slept)
	if slept.peak-slept.base > service.StreamMemory+margin {
		t.Errorf("hibernating took the heap up %d bytes, over StreamMemory %d + %d", slept.peak-slept.base, service.StreamMemory, margin)
	}
	c.send("DELETE", "/v1/sessions/"+other, "", nil)
	c.send("DELETE", "/v1/sessions/"+id, "", nil)
}
