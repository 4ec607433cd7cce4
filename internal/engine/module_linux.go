//go:build linux

package engine

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps the size bytes of f read-only, and returns them with the
// function that unmaps them. The files mapped are only ever replaced by a
// rename, never written in place or truncated, so the mapping keeps the bytes
// that were checked.
func mapFile(f *os.File, size int) ([]byte, func(), error) {
	data, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, func() { unix.Munmap(data) }, nil
}
