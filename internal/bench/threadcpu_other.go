//go:build !linux

package bench

import "time"

// threadCPU is the CPU time the calling thread has used; here the system
// cannot say (CLOCK_THREAD_CPUTIME_ID is read on Linux only).
func threadCPU() (time.Duration, bool) { return 0, false }
