package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/spine-run/spine"
)

// The memory a server may use, and the session defaults it gives
// (docs/deploy.md, "Memory"). A Guest's linear memory is not Go heap, so
// GOMEMLIMIT cannot bound it, and it never shrinks: what bounds a replica
// is how many Guests it keeps and how large each may grow. So the defaults
// of --live-sessions and of the hibernated snapshots kept in memory come
// from the budget: --memory, else the limit of the process's cgroup (a
// container's memory limit), else none (the library's defaults).

// memoryBase is what a server takes besides its Guests: the Go runtime and
// heap, the compiled Guest, the prepared image, buffers. An idle spine serve
// holds about 100 MiB (VmRSS after a run); this leaves room for load.
const memoryBase = 256 << 20

// memoryPlan is how a budget is spent: the runs at once, each in a Guest of
// up to runMemory; the live sessions, each up to sessionMemory; the
// snapshots of hibernated sessions kept in memory; and memoryBase.
type memoryPlan struct {
	budget        uint64 // bytes; 0: none known
	source        string // "--memory", "the cgroup's limit"
	runs          int
	runMemory     uint64
	live          int
	sessionMemory uint64
	hibernated    uint64 // bytes of snapshots in memory (0 with a session folder: they go to disk)
}

// need is the most memory the plan lets the process take.
func (p memoryPlan) need() uint64 {
	return memoryBase + uint64(p.runs)*p.runMemory + uint64(p.live)*p.sessionMemory + p.hibernated
}

// planMemory spends budget: the runs first, then a quarter of what is left
// for hibernated snapshots in memory (none when onDisk), the rest for live
// sessions, at least one and at most maxLive. ok is false when the budget
// cannot hold memoryBase, the runs and one live session.
func planMemory(budget uint64, runs int, runMemory, sessionMemory uint64, onDisk bool, maxLive int) (p memoryPlan, ok bool) {
	p = memoryPlan{budget: budget, runs: runs, runMemory: runMemory, sessionMemory: sessionMemory, live: 1}
	fixed := memoryBase + uint64(runs)*runMemory
	if budget < fixed+sessionMemory {
		return p, false
	}
	left := budget - fixed
	if !onDisk {
		p.hibernated = left / 4
		left -= p.hibernated
	}
	p.live = min(max(1, int(left/sessionMemory)), maxLive)
	return p, true
}

func (p memoryPlan) String() string {
	hib := "hibernated snapshots on disk"
	if p.hibernated > 0 {
		hib = fmt.Sprintf("%d MiB of hibernated snapshots in memory", p.hibernated>>20)
	}
	return fmt.Sprintf("memory %d MiB (%s): %d runs of up to %d MiB, %d live sessions of up to %d MiB, %s, %d MiB for the rest",
		p.budget>>20, p.source, p.runs, p.runMemory>>20, p.live, p.sessionMemory>>20, hib, memoryBase>>20)
}

// memoryBudget returns the bytes the process may use and where that comes
// from: --memory (MiB) when set, else the limit of the cgroup the process is
// in (read under root, "/" but in tests), else 0.
func memoryBudget(flagMiB int, root string) (uint64, string) {
	if flagMiB > 0 {
		return uint64(flagMiB) << 20, "--memory"
	}
	if limit := cgroupLimit(root); limit > 0 {
		return limit, "the cgroup's limit"
	}
	return 0, ""
}

// cgroupLimit returns the memory limit of the cgroup the process is in,
// cgroup v2 (memory.max) or v1 (memory.limit_in_bytes), or 0 when it has
// none ("max", or v1's no-limit value) or none can be read.
func cgroupLimit(root string) uint64 {
	data, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		path := filepath.Clean("/" + parts[2])
		switch {
		case parts[0] == "0" && parts[1] == "": // v2
			if limit := readLimit(filepath.Join(root, "sys/fs/cgroup", path, "memory.max")); limit > 0 {
				return limit
			}
			if limit := readLimit(filepath.Join(root, "sys/fs/cgroup/memory.max")); limit > 0 {
				return limit // a namespaced cgroup: its own files at the mount's root
			}
		case containsField(parts[1], "memory"): // v1
			if limit := readLimit(filepath.Join(root, "sys/fs/cgroup/memory", path, "memory.limit_in_bytes")); limit > 0 {
				return limit
			}
			if limit := readLimit(filepath.Join(root, "sys/fs/cgroup/memory/memory.limit_in_bytes")); limit > 0 {
				return limit
			}
		}
	}
	return 0
}

// noLimitV1 is at or above what cgroup v1 reports for no limit (the
// largest page-aligned int64).
const noLimitV1 = 1 << 62

// readLimit reads a cgroup limit file: a number of bytes, or 0 for "max",
// v1's no-limit value, or a file that cannot be read.
func readLimit(path string) uint64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || n >= noLimitV1 {
		return 0
	}
	return n
}

func containsField(list, name string) bool {
	for _, f := range strings.Split(list, ",") {
		if f == name {
			return true
		}
	}
	return false
}

// runsAtOnce is how many runs a server of slots (0: the pool size) takes at
// once: a Guest each.
func runsAtOnce(slots int) int {
	if slots > 0 {
		return slots
	}
	return runtime.GOMAXPROCS(0)
}

// applyMemory sets the session defaults the memory budget gives (--memory
// MiB, else the cgroup's limit) where their flags were not set (set names
// the flags given), and says how the budget is spent, or warns that the
// flags given take more than it. Without a budget it changes nothing.
func applyMemory(so *spine.SessionOptions, set map[string]bool, memoryMiB, slots int, runMemory uint64, out serverLog) {
	budget, source := memoryBudget(memoryMiB, "/")
	if budget == 0 {
		return
	}
	plan, ok := planMemory(budget, runsAtOnce(slots), runMemory, so.MemoryLimit, so.Dir != "", 64)
	plan.source = source
	if !ok {
		out.warn(fmt.Sprintf("memory %d MiB (%s) does not hold %d runs of up to %d MiB, a session of up to %d MiB and %d MiB for the rest: lower --slots or --session-memory, or give more memory",
			budget>>20, source, plan.runs, runMemory>>20, so.MemoryLimit>>20, memoryBase>>20))
		return
	}
	if set["live-sessions"] {
		plan.live = so.MaxLive
	} else {
		so.MaxLive = plan.live
	}
	if so.Dir == "" {
		so.HibernatedMemory = plan.hibernated
	}
	if need := plan.need(); need > budget {
		out.warn(fmt.Sprintf("the flags take more memory than %d MiB (%s): %d live sessions of up to %d MiB, %d runs of up to %d MiB, %d MiB of hibernated snapshots and %d MiB for the rest need %d MiB; the kernel may kill the process",
			budget>>20, source, plan.live, so.MemoryLimit>>20, plan.runs, runMemory>>20, plan.hibernated>>20, memoryBase>>20, need>>20))
		return
	}
	out.info(plan.String(), "budget_mib", budget>>20, "live_sessions", plan.live)
}

// flagsSet returns the names of the flags fs was given.
func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}
