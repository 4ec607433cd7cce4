// Package heapwatch measures the memory a function takes while it runs, for
// the tests that hold the Host to a documented memory constant.
package heapwatch

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// A Watch is what a function took: the peak of the Go heap in use (HeapInuse,
// sampled as it ran) over the heap before it, the bytes it allocated
// (TotalAlloc), which bounds any peak however the samples fall, and the
// process's peak resident memory (VmHWM, reset before) over its resident
// memory before, where Linux tells them (0 otherwise).
type Watch struct {
	Base, Peak, Allocated uint64
	RSS                   int64
}

// Grew is how far the heap in use rose over its size before.
func (w Watch) Grew() uint64 { return w.Peak - w.Base }

// Run runs f and returns what it took.
func Run(f func()) Watch {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w := Watch{Base: m.HeapInuse, Peak: m.HeapInuse}
	total := m.TotalAlloc
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // VmHWM := VmRSS
	rssBefore := procStatus("VmRSS")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var s runtime.MemStats
		for {
			select {
			case <-stop:
				return
			default:
			}
			runtime.ReadMemStats(&s)
			w.Peak = max(w.Peak, s.HeapInuse)
			runtime.Gosched()
		}
	})
	f()
	close(stop)
	wg.Wait()
	runtime.ReadMemStats(&m)
	w.Peak = max(w.Peak, m.HeapInuse)
	w.Allocated = m.TotalAlloc - total
	if rssBefore > 0 {
		w.RSS = procStatus("VmHWM") - rssBefore
	}
	return w
}

func (w Watch) String() string {
	return fmt.Sprintf("heap in use +%.1f MiB at most, %.1f MiB allocated, peak RSS +%.1f MiB", mib(w.Grew()), mib(w.Allocated), float64(w.RSS)/(1<<20))
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

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
