package engine

import (
	"fmt"
	"unsafe"
)

// SharedImage is an image in a sealed memfd for another engine's linear
// memories (the wasmtime module's): each maps it copy-on-write over the
// start of a memory that engine reserved, and resets it as this engine resets
// its own (cowMemory.reset: the pages a run wrote, found by PAGEMAP_SCAN,
// copied back from the image). Linux only: elsewhere NewSharedImage fails.
type SharedImage struct{ img *memfdImage }

// NewSharedImage copies data, a whole number of 4 KiB pages, into a sealed
// memfd.
func NewSharedImage(data []byte) (*SharedImage, error) {
	if len(data)%StatePageSize != 0 {
		return nil, fmt.Errorf("spine: an image of %d bytes is not a whole number of pages", len(data))
	}
	img, err := newMemfdImage(data)
	if err != nil {
		return nil, err
	}
	return &SharedImage{img: img}, nil
}

// Size is the image's size in bytes.
func (s *SharedImage) Size() int { return len(s.img.view) }

// Close releases the memfd; every memory mapping it stays valid.
func (s *SharedImage) Close() error { return s.img.close() }

// MappedMemory is a SharedImage mapped over another engine's memory.
type MappedMemory struct{ mem *cowMemory }

// MapOver maps the image copy-on-write over the Size bytes at base, which
// the caller's engine reserved, made accessible and keeps for the mapping's
// life: the mapping goes when that engine unmaps its memory.
func (s *SharedImage) MapOver(base unsafe.Pointer) (*MappedMemory, error) {
	mem, err := s.img.mapOver(base)
	if err != nil {
		return nil, err
	}
	return &MappedMemory{mem: mem}, nil
}

// Reset brings the mapped range back to the image.
func (m *MappedMemory) Reset() error { return m.mem.reset() }
