package spine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// These tests load a Runner: many runs at once, and ten thousand in a row
// that must leave nothing behind. The pool's own behaviour (reuse, reset,
// recovery) is tested in internal/engine.

func TestPoolHammer(t *testing.T) {
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: 2})
	programs := []struct {
		src  string
		want string
	}{
		{`lookup(key="book") * inputs["n"]`, "n21"},
		{`print("x" * inputs["n"])` + "\n" + `result = inputs["n"]`, "n"},
		{"1/0", "ZeroDivisionError"},
		{"while True: pass", "deadline"},
		{`import json; json.dumps({"n": inputs["n"]})`, "json"},
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				p := programs[(g+i)%len(programs)]
				n := g*100 + i
				ctx, cancel := context.WithCancel(context.Background())
				if p.want == "deadline" {
					ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
				}
				out, err := r.Run(ctx, spine.Request{Source: p.src, Inputs: map[string]int{"n": n}})
				cancel()
				switch p.want {
				case "n21":
					if err != nil || string(out.Value) != fmt.Sprint(21*n) {
						errs <- fmt.Errorf("%q n=%d: %v %v", p.src, n, out, err)
					}
				case "n":
					if err != nil || string(out.Value) != fmt.Sprint(n) || out.Stdout != strings.Repeat("x", n)+"\n" {
						errs <- fmt.Errorf("%q n=%d: %v", p.src, n, err)
					}
				case "json":
					if err != nil || string(out.Value) != fmt.Sprintf(`"{\"n\": %d}"`, n) {
						errs <- fmt.Errorf("%q n=%d: %v %v", p.src, n, out, err)
					}
				case "ZeroDivisionError":
					var pe *spine.PythonError
					if !errors.As(err, &pe) || pe.Type != "ZeroDivisionError" {
						errs <- fmt.Errorf("%q: %v", p.src, err)
					}
				case "deadline":
					if !errors.Is(err, context.DeadlineExceeded) {
						errs <- fmt.Errorf("%q: %v", p.src, err)
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestNoLeaks runs 10,000 programs and checks that goroutines, file
// descriptors and memory mappings come back to where they were.
func TestNoLeaks(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 runs; skipped with -short")
	}
	before := countResources()
	r, err := spine.New(context.Background(), spinetest.NewTools().Manifest(), &spine.Options{PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	programs := []string{`lookup(key="book")`, "1/0", `print("hello")`}
	start := time.Now()
	for i := 0; i < 10000; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		src := programs[i%len(programs)]
		switch {
		case i%500 == 0: // a time-out: the instance is replaced
			src = "while True: pass"
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Millisecond)
		case i%100 == 1: // a file left open: the instance is replaced
			src = `open("/usr/local/lib/python311.zip", "rb")`
		case i%100 == 2: // memory growth: the instance is replaced
			src = "x = bytearray(40 << 20)"
		}
		r.Run(ctx, spine.Request{Source: src})
		cancel()
	}
	t.Logf("10,000 runs in %v", time.Since(start))
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	before.check(t)
}

// resources is what the process holds: goroutines, descriptors, memory
// mappings and OS threads.
type resources struct{ goroutines, fds, maps, threads int }

func countResources() resources {
	runtime.GC()
	entries, _ := os.ReadDir("/proc/self/fd")
	data, _ := os.ReadFile("/proc/self/maps")
	status, _ := os.ReadFile("/proc/self/status")
	var threads int
	if _, rest, ok := strings.Cut(string(status), "Threads:"); ok {
		threads, _ = strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
	}
	return resources{runtime.NumGoroutine(), len(entries), bytes.Count(data, []byte("\n")), threads}
}

// leakedSince reports whether now holds more than before. Go never ends an
// OS thread it started, and each keeps a stack, a guard page and a malloc
// arena, so mappings may grow by 4 a new thread.
func (before resources) leakedSince(now resources) bool {
	return now.goroutines > before.goroutines || now.fds > before.fds ||
		now.maps > before.maps+8+4*max(now.threads-before.threads, 0)
}

// check fails t if the process holds more than before. Goroutines that are
// ending may not be gone yet: it gives them a few collections first.
func (before resources) check(t *testing.T) {
	t.Helper()
	now := countResources()
	for i := 0; i < 100 && before.leakedSince(now); i++ {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
		now = countResources()
	}
	t.Logf("%+v -> %+v", before, now)
	if before.leakedSince(now) {
		t.Fatalf("leak: %+v -> %+v", before, now)
	}
}
