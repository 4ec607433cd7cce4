// Package experimental holds Spine's knobs that are not part of its stable
// API: they exist to measure and debug the Runner, and may change or go away
// in any release. Like wazero's, they travel in the context given to
// spine.New.
package experimental

import (
	"context"

	"github.com/spine-run/spine/internal/engine"
)

// StartMode says how each run's Guest starts.
type StartMode = engine.StartMode

// The start modes.
const (
	// StartAuto, the default, starts from the prepared image, copy-on-write
	// where the platform allows it (Linux), by copying elsewhere.
	StartAuto = engine.StartAuto
	// StartFresh starts CPython from scratch for every run: slow (about
	// 140 ms a run), for comparison and debugging. No pool.
	StartFresh = engine.StartFresh
	// StartCopy copies the prepared image into each new Guest.
	StartCopy = engine.StartCopy
	// StartCOW maps the prepared image copy-on-write (Linux only).
	StartCOW = engine.StartCOW
)

// WithStart returns a context that makes spine.New start every run's Guest
// in mode.
func WithStart(ctx context.Context, mode StartMode) context.Context {
	return engine.WithStart(ctx, mode)
}
