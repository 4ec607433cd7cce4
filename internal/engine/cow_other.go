//go:build !linux

package engine

import (
	"os"
	"unsafe"
)

// COWSupported says whether copy-on-write images work here (Linux only).
const COWSupported = false

type memfdImage struct{ view []byte }

func newMemfdImage([]byte) (*memfdImage, error) { return nil, errNoCOWHere }
func fileMemfdImage(*os.File, int, uint32) (*memfdImage, uint32, error) {
	return nil, 0, errNoCOWHere
}
func (*memfdImage) close() error                         { return nil }
func (*memfdImage) newMemory(uint64) (*cowMemory, error) { return nil, errNoCOWHere }

type cowMemory struct{}

func (*cowMemory) Reallocate(uint64) []byte                    { return nil }
func (*cowMemory) Free()                                       {}
func (*cowMemory) reset() error                                { return errNoCOWHere }
func (*cowMemory) touched(int) ([]uint32, bool)                { return nil, false }
func (*cowMemory) setLimit(uint64) bool                        { return false }
func (*cowMemory) populate([]uint32)                           {}
func (*cowMemory) counted(call func())                         { call() }
func (*cowMemory) exposed()                                    {}
func (*memfdImage) mapOver(unsafe.Pointer) (*cowMemory, error) { return nil, errNoCOWHere }
