//go:build !linux

package engine

// COWSupported says whether copy-on-write images work here (Linux only).
const COWSupported = false

type memfdImage struct{ view []byte }

func newMemfdImage([]byte) (*memfdImage, error)          { return nil, errNoCOWHere }
func (*memfdImage) close() error                         { return nil }
func (*memfdImage) newMemory(uint64) (*cowMemory, error) { return nil, errNoCOWHere }

type cowMemory struct{}

func (*cowMemory) Reallocate(uint64) []byte     { return nil }
func (*cowMemory) Free()                        {}
func (*cowMemory) reset() error                 { return errNoCOWHere }
func (*cowMemory) touched(int) ([]uint32, bool) { return nil, false }
func (*cowMemory) setLimit(uint64) bool         { return false }
func (*cowMemory) populate([]uint32)            {}
