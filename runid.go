package spine

import (
	"context"
	"sync/atomic"
)

// runIDs numbers the runs of every Runner of the process: a tool may serve
// several Runners, and must not take two of their runs for one.
var runIDs atomic.Uint64

// RunOf returns the number of the run a tool is called for, from the ctx the
// tool gets: the same for every call of one run (its early reads included),
// different for every run in the process (a session's runs included), and 0
// outside a run. A tool that keeps state per program, as mcpclient's refusal
// of a program that broke its server does, keys it with this number.
func RunOf(ctx context.Context) uint64 {
	if st, _ := ctx.Value(runKey{}).(*runState); st != nil {
		return st.id
	}
	return 0
}
