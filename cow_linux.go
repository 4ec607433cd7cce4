//go:build linux

package spine

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

const cowSupported = true

// memfdImage is a prepared image in a sealed memfd: nobody can change or
// shrink it while instances map it.
type memfdImage struct {
	fd   int
	size int
}

// newMemfdImage copies data into a new sealed memfd, skipping zero pages (the
// file stays sparse there).
func newMemfdImage(data []byte) (*memfdImage, error) {
	fd, err := unix.MemfdCreate("spine-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	fail := func(step string, err error) (*memfdImage, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", step, err)
	}
	if err := unix.Ftruncate(fd, int64(len(data))); err != nil {
		return fail("ftruncate", err)
	}
	const page = 4096
	for off := 0; off < len(data); {
		for off < len(data) && isZero(data[off:min(off+page, len(data))]) {
			off += page
		}
		end := off
		for end < len(data) && !isZero(data[end:min(end+page, len(data))]) {
			end += page
		}
		end = min(end, len(data))
		for off < end {
			n, err := unix.Pwrite(fd, data[off:end], int64(off))
			if err != nil {
				return fail("write", err)
			}
			off += n
		}
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fail("seal", err)
	}
	return &memfdImage{fd: fd, size: len(data)}, nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (m *memfdImage) close() error { return unix.Close(m.fd) }

// cowMemory is one instance's linear memory: max bytes of address space,
// anonymous and reserved lazily, with the image mapped privately over its
// start. A run pays only for the pages it touches; reset drops them.
type cowMemory struct {
	buf       []byte // the whole mapping; wazero sees buf[:size]
	imageSize int
}

func (m *memfdImage) newMemory(max uint64) (*cowMemory, error) {
	if max < uint64(m.size) {
		max = uint64(m.size)
	}
	buf, err := unix.Mmap(-1, 0, int(max), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", max, err)
	}
	if _, err := unix.MmapPtr(m.fd, 0, unsafe.Pointer(&buf[0]), uintptr(m.size),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED); err != nil {
		unix.Munmap(buf)
		return nil, fmt.Errorf("mmap image: %w", err)
	}
	return &cowMemory{buf: buf, imageSize: m.size}, nil
}

// Reallocate implements experimental.LinearMemory: growth never moves memory.
func (c *cowMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(c.buf)) {
		return nil
	}
	return c.buf[:size]
}

// Free implements experimental.LinearMemory. wazero calls it when the module
// closes, on the goroutine that closes it.
func (c *cowMemory) Free() {
	if c.buf != nil {
		unix.Munmap(c.buf)
		c.buf = nil
	}
}

// reset drops every page the last run touched: the image's pages read the
// memfd again, the rest read zero.
func (c *cowMemory) reset() error {
	return unix.Madvise(c.buf[:c.imageSize], unix.MADV_DONTNEED)
}
