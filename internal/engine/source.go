package engine

import (
	"context"
	"io"
	"time"
)

// Source is what a Guest takes from the Host outside its bridge calls: the
// time, through WASI's clock_time_get and the scratch tree's file times,
// and random bytes, through WASI's random_get. A run given one (Use) reads
// these from it instead of the system; a recorded run's Source notes what
// the system gave, a replay's gives what the record holds.
type Source interface {
	// Walltime is the time since the epoch in nanoseconds (CLOCK_REALTIME),
	// Nanotime a monotonic clock in nanoseconds (CLOCK_MONOTONIC).
	Walltime() int64
	Nanotime() int64
	// Random fills p with random bytes.
	Random(p []byte)
	// Sleep is the Guest's sleep of ns nanoseconds; false when it is not
	// to wait at all (a replay: the time it reads next is the record's).
	Sleep(ns int64) bool
}

// Use makes src the Guest's source of time and random bytes for its next
// run, from its Begin to its End (which goes back to the system's); nil: the
// system's.
func (inst *Instance) Use(src Source) {
	inst.src = src
	if src != nil {
		inst.fds.scratch.SetClock(src.Walltime)
	} else {
		inst.fds.scratch.SetClock(nil)
	}
}

// nanoBase is where the Guest's monotonic clock counts from, as wazero's own.
var nanoBase = time.Now()

// walltime, nanotime and the guestRandom reader are the Guest's clocks and
// random source: the run's Source when it has one, the system's (or, while
// an image is captured, its fixed sequence) otherwise: one nil check more
// than wazero's own on a run without a Source.
func (inst *Instance) walltime() (sec int64, nsec int32) {
	if inst.src != nil {
		ns := inst.src.Walltime()
		return ns / 1e9, int32(ns % 1e9)
	}
	t := time.Now()
	return t.Unix(), int32(t.Nanosecond())
}

func (inst *Instance) nanotime() int64 {
	if inst.src != nil {
		return inst.src.Nanotime()
	}
	return Nanotime()
}

// Nanotime is the monotonic clock Guests read without a Source: a Source
// that takes the system's time reads it, so that a session's runs see one
// clock whether recorded or not.
func Nanotime() int64 { return int64(time.Since(nanoBase)) }

type guestRandom struct {
	inst   *Instance
	system io.Reader
}

func (g guestRandom) Read(p []byte) (int, error) {
	if g.inst.src != nil {
		g.inst.src.Random(p)
		return len(p), nil
	}
	return g.system.Read(p)
}

// pause is the Guest's sleep when it runs with a Source that does not wait.
func (inst *Instance) pause(ctx context.Context, ns int64) {
	if inst.src != nil && !inst.src.Sleep(ns) {
		return
	}
	sleep(ctx, ns)
}
