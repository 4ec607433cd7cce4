package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/seed"
)

// Memory is the process's memory as a pool of Instances fills and runs.
type Memory struct {
	Instances int            `json:"instances"`
	FillMs    float64        `json:"fill_ms"` // New until the pool was full
	Before    MemorySnapshot `json:"before"`  // before New
	First     MemorySnapshot `json:"first"`   // as soon as the pool held FirstReady instances
	Idle      MemorySnapshot `json:"idle"`    // the pool full, no instance ever ran
	Ran       MemorySnapshot `json:"ran"`     // after every instance ran once and went back to the pool
	// FirstReady is how many instances the pool held at the First snapshot.
	FirstReady int `json:"first_ready"`
	// MarginalKiB is the RSS one more idle instance costs: (Idle − First) / (Instances − FirstReady).
	MarginalKiB float64 `json:"marginal_rss_per_instance_kib"`
	// RanExtraKiB is the RSS an instance keeps after one run: (Ran − Idle) / Instances.
	RanExtraKiB float64 `json:"ran_extra_rss_per_instance_kib"`
	NoProc      bool    `json:"no_proc,omitempty"`
}

// MemorySnapshot is the process's memory at one moment, and each instance's
// linear memory as /proc/self/smaps shows it.
type MemorySnapshot struct {
	RSSMiB          float64 `json:"rss_mib"`           // VmRSS
	PssMiB          float64 `json:"pss_mib"`           // smaps_rollup Pss
	PrivateDirtyMiB float64 `json:"private_dirty_mib"` // smaps_rollup Private_Dirty
	GuestMappings   int     `json:"guest_mappings"`    // instance memories found in smaps
	GuestRSSKiB     float64 `json:"guest_rss_kib"`     // per instance
	GuestDirtyKiB   float64 `json:"guest_private_dirty_kib"`
}

// snapMemory reads the process's memory now, after a full collection.
func snapMemory() MemorySnapshot {
	debug.FreeOSMemory() // a full collection, and the heap's free pages back to the OS
	status, rollup := procStatus(), smapsRollup()
	s := MemorySnapshot{
		RSSMiB:          float64(status["VmRSS"]) / 1024,
		PssMiB:          float64(rollup["Pss"]) / 1024,
		PrivateDirtyMiB: float64(rollup["Private_Dirty"]) / 1024,
	}
	count, rss, dirty := guestMappings()
	s.GuestMappings = count
	if count > 0 {
		s.GuestRSSKiB = float64(rss) / float64(count)
		s.GuestDirtyKiB = float64(dirty) / float64(count)
	}
	return s
}

// measureMemory fills a pool of n instances and reads the process's memory:
// before New, as the pool fills, with the pool full, and after every instance
// ran the program once.
func measureMemory(ctx context.Context, n int) (*Memory, error) {
	runtime.GC()
	debug.FreeOSMemory()
	m := &Memory{Instances: n, Before: snapMemory()}
	if m.Before.RSSMiB == 0 {
		m.NoProc = true
	}
	start := time.Now()
	// lookup waits until all n runs are inside it, so every pooled instance runs once.
	var arrived atomic.Int64
	all := make(chan struct{})
	barrier := func(ctx context.Context, args json.RawMessage) (any, error) {
		if arrived.Add(1) == int64(n) {
			close(all)
		}
		select {
		case <-all:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return seed.Lookup(ctx, args)
	}
	r, err := spine.New(ctx, spine.Manifest{"lookup": {Call: barrier}}, &spine.Options{PoolSize: n})
	if err != nil {
		return nil, err
	}
	defer closeRunner(ctx, r)
	if err := waitPool(ctx, r, 1); err != nil {
		return nil, err
	}
	m.FirstReady = r.Stats().PoolReady
	m.First = snapMemory()
	if err := waitPool(ctx, r, n); err != nil {
		return nil, err
	}
	m.FillMs = ms(time.Since(start))
	m.Idle = snapMemory()
	if n > m.FirstReady {
		m.MarginalKiB = (m.Idle.RSSMiB - m.First.RSSMiB) * 1024 / float64(n-m.FirstReady)
	}

	// Every instance runs the program once (all n at the same time), is reset
	// and goes back to the pool: the pool's steady state.
	runCtx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a safety net, not a measurement
	defer cancel()
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			out, err := r.Run(runCtx, request())
			if err == nil && string(out.Value) != "63" {
				err = fmt.Errorf("result %s, want 63", out.Value)
			}
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	if err := waitPool(ctx, r, n); err != nil {
		return nil, err
	}
	m.Ran = snapMemory()
	m.RanExtraKiB = (m.Ran.RSSMiB - m.Idle.RSSMiB) * 1024 / float64(n)
	return m, nil
}

// procStatus reads the kB fields of /proc/self/status (VmRSS, VmHWM, ...).
func procStatus() map[string]int64 { return readKB("/proc/self/status") }

// smapsRollup reads /proc/self/smaps_rollup (Rss, Pss, Private_Dirty, ...), in kB.
func smapsRollup() map[string]int64 { return readKB("/proc/self/smaps_rollup") }

func readKB(path string) map[string]int64 {
	out := map[string]int64{}
	data, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		if v, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// guestMappings finds each instance's linear memory in /proc/self/smaps — the
// image's memfd mapped privately, and the anonymous mapping right after it —
// and returns how many there are with their total Rss and Private_Dirty, in kB.
func guestMappings() (count int, rss, dirty int64) {
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, 0, 0
	}
	type mapping struct {
		start, end uint64
		image      bool
		rss, dirty int64
	}
	var maps []*mapping
	var cur *mapping
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && !strings.HasSuffix(fields[0], ":") {
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				// An instance maps the image privately and writably ("rw-p").
				image := strings.Contains(line, "memfd:spine-image") && len(fields) > 1 && fields[1] == "rw-p"
				cur = &mapping{start: start, end: end, image: image}
				maps = append(maps, cur)
				continue
			}
		}
		if cur == nil || len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "Rss:":
			cur.rss = v
		case "Private_Dirty:":
			cur.dirty = v
		}
	}
	byStart := map[uint64]*mapping{}
	for _, m := range maps {
		byStart[m.start] = m
	}
	for _, m := range maps {
		if !m.image {
			continue
		}
		count++
		rss += m.rss
		dirty += m.dirty
		if tail := byStart[m.end]; tail != nil && !tail.image {
			rss += tail.rss
			dirty += tail.dirty
		}
	}
	return count, rss, dirty
}
