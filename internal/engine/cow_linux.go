//go:build linux

package engine

import (
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// COWSupported says whether copy-on-write images work here (Linux only).
const COWSupported = true

// memfdImage is a prepared image in a sealed memfd: nobody can change or
// shrink it while instances map it.
type memfdImage struct {
	fd      int
	size    int
	view    []byte   // the memfd mapped read-only: the image's bytes, to restore pages from
	pagemap *os.File // /proc/self/pagemap, to find the pages a run made private; nil if unreadable
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
	img, err := sealMemfd(fd, len(data))
	if err != nil {
		return fail("seal", err)
	}
	return img, nil
}

// fileMemfdImage copies the size bytes of image that follow f's header into a
// new sealed memfd, and returns it with the CRC-32C of those bytes continuing
// sum. Only the file's data is read and copied: its holes (the zero pages
// writeImage skipped) stay holes in the memfd and are summed as zeros.
func fileMemfdImage(f *os.File, size int, sum uint32) (*memfdImage, uint32, error) {
	fd, err := unix.MemfdCreate("spine-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, 0, fmt.Errorf("memfd_create: %w", err)
	}
	fail := func(step string, err error) (*memfdImage, uint32, error) {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("%s: %w", step, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("ftruncate", err)
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return fail("image file", err)
	}
	// seek returns where the next data (or hole) begins at or after pos,
	// in the image; size when there is none. A file system that cannot
	// tell says the whole file is data.
	seek := func(pos, whence int) (int, error) {
		var off int64
		var serr error
		if err := raw.Control(func(in uintptr) {
			off, serr = unix.Seek(int(in), int64(imageHeaderSize+pos), whence)
		}); err != nil {
			return 0, err
		}
		if serr == unix.ENXIO {
			return size, nil
		}
		if serr != nil {
			return 0, serr
		}
		return min(max(int(off)-imageHeaderSize, pos), size), nil
	}
	buf := make([]byte, 1<<20)
	for pos := 0; pos < size; {
		start, err := seek(pos, unix.SEEK_DATA)
		if err != nil {
			return fail("seek data", err)
		}
		sum = crcZeros(sum, start-pos)
		if start == size {
			break
		}
		end, err := seek(start, unix.SEEK_HOLE)
		if err != nil {
			return fail("seek hole", err)
		}
		for start < end {
			chunk := buf[:min(len(buf), end-start)]
			if _, err := f.ReadAt(chunk, int64(imageHeaderSize+start)); err != nil {
				return fail("read", err)
			}
			sum = crc32.Update(sum, castagnoli, chunk)
			for len(chunk) > 0 {
				n, err := unix.Pwrite(fd, chunk, int64(start))
				if err != nil {
					return fail("write", err)
				}
				chunk, start = chunk[n:], start+n
			}
		}
		pos = end
	}
	img, err := sealMemfd(fd, size)
	if err != nil {
		return fail("seal", err)
	}
	return img, sum, nil
}

// sealMemfd seals fd, the image's size bytes, and maps it for reading.
func sealMemfd(fd, size int) (*memfdImage, error) {
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return nil, err
	}
	view, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	img := &memfdImage{fd: fd, size: size, view: view}
	if f, err := os.Open("/proc/self/pagemap"); err == nil {
		img.pagemap = f
	}
	return img, nil
}

func (m *memfdImage) close() error {
	if m.pagemap != nil {
		m.pagemap.Close()
	}
	unix.Munmap(m.view)
	return unix.Close(m.fd)
}

// cowMemory is one instance's linear memory: max bytes of address space,
// anonymous and reserved lazily, with the image mapped privately over its
// start. A run pays only for the pages it touches; reset drops them.
type cowMemory struct {
	buf       []byte // the whole mapping; wazero sees buf[:size]
	limit     uint64 // when not 0, the most it may grow to, below len(buf)
	imageSize int
	image     *memfdImage
	entries   []byte       // pagemap entries, reused by reset
	regions   []pageRegion // PAGEMAP_SCAN's answer, reused by reset
	private   []pageRegion // the runs of private pages, reused by reset
	// faults is the process's page-fault count read just before the scan
	// that found private; scanned says private is that scan's answer (no
	// reset since dropped pages or read the pagemap instead).
	faults  int64
	scanned bool
	scans   int // PAGEMAP_SCAN walks made, for tests
	// calls is the page faults the threads calling into the Guest took
	// during those calls since the last scan (counted); -1 once one could not
	// be counted.
	calls int64
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
	return &cowMemory{buf: buf, imageSize: m.size, image: m}, nil
}

// Reallocate implements experimental.LinearMemory: growth never moves memory.
func (c *cowMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(c.buf)) || c.limit != 0 && size > c.limit {
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

// maxRestorePages bounds the pages reset restores by copying; past it, it
// drops them all instead.
const maxRestorePages = 4096

// reset brings the memory back to the image. The pages a run wrote are the
// private (copied-on-write) ones; /proc/self/pagemap tells which they are, and
// reset copies the image's bytes back over them. They stay mapped and private,
// so the next run writes them without a page fault — a fault costs more than
// copying a page. Without pagemap, or when too many pages are private, it drops
// every page instead (MADV_DONTNEED): the image's pages then read the memfd
// again, on a fault each. While no page fault can have made another page
// private since the last scan, the pages it found are still all the private
// ones, and reset copies them back without asking the kernel again: when the
// calls into the Guest took none (counted), or the process none at all
// (processFaults).
func (c *cowMemory) reset() error {
	if c.scanned && (c.calls == 0 || processFaults() == c.faults) {
		c.restore()
		return nil
	}
	c.scanned = false
	pages := c.imageSize / pageSize
	if c.image.pagemap != nil && !noPagemapScan.Load() {
		if done, err := c.resetScan(); err == nil {
			if done {
				return nil
			}
		} else {
			noPagemapScan.Store(true) // an older kernel: read the pagemap instead
		}
	}
	if c.image.pagemap != nil {
		if cap(c.entries) < pages*8 {
			c.entries = make([]byte, pages*8)
		}
		entries := c.entries[:pages*8]
		base := uintptr(unsafe.Pointer(&c.buf[0]))
		if n, err := c.image.pagemap.ReadAt(entries, int64(base/pageSize*8)); err == nil && n == len(entries) {
			private := 0
			for p := 0; p < pages; p++ {
				if pagePrivate(entries[p*8:]) {
					private++
				}
			}
			if private <= maxRestorePages {
				for p := 0; p < pages; p++ {
					if pagePrivate(entries[p*8:]) {
						copy(c.buf[p*pageSize:(p+1)*pageSize], c.image.view[p*pageSize:(p+1)*pageSize])
					}
				}
				return nil
			}
		}
	}
	return unix.Madvise(c.buf[:c.imageSize], unix.MADV_DONTNEED)
}

// noPagemapScan is set once the PAGEMAP_SCAN ioctl (Linux 6.7) failed here.
var noPagemapScan atomic.Bool

// PAGEMAP_SCAN's request and page categories (linux/fs.h).
const (
	pagemapScan     = 0xc0606610 // _IOWR('f', 16, struct pm_scan_arg)
	pageIsFile      = 1 << 2
	pageIsPresent   = 1 << 3
	pageIsSwapped   = 1 << 4
	scanRegionBatch = 256
)

type pmScanArg struct {
	size, flags, start, end, walkEnd, vec, vecLen, maxPages       uint64
	categoryInverted, categoryMask, categoryAnyofMask, returnMask uint64
}

type pageRegion struct{ start, end, categories uint64 }

// resetScan is reset's fast way: PAGEMAP_SCAN asks the kernel for the runs of
// pages present or swapped out, with their categories, skipping untouched
// page tables at once, where a read of the pagemap gets an entry for each of
// the image's pages (64 KiB for a 32 MiB image, most of a reset's time). A
// page private to this instance is one present and not of the file, or
// swapped out. done is false when too many pages are private (reset then
// drops them all); an error means the kernel has no PAGEMAP_SCAN.
func (c *cowMemory) resetScan() (done bool, err error) {
	if cap(c.regions) == 0 {
		c.regions = make([]pageRegion, scanRegionBatch)
	}
	faults := processFaults() // before the scan: a fault during it makes the next reset scan again
	c.scans++
	regions := c.regions[:cap(c.regions)]
	base := uint64(uintptr(unsafe.Pointer(&c.buf[0])))
	end := base + uint64(c.imageSize)
	private := c.private[:0]
	count := 0
	for start := base; start < end; {
		arg := pmScanArg{
			size: uint64(unsafe.Sizeof(pmScanArg{})), start: start, end: end,
			vec: uint64(uintptr(unsafe.Pointer(&regions[0]))), vecLen: uint64(len(regions)),
			categoryAnyofMask: pageIsPresent | pageIsSwapped,
			returnMask:        pageIsPresent | pageIsSwapped | pageIsFile,
		}
		n, _, errno := unix.Syscall(unix.SYS_IOCTL, c.image.pagemap.Fd(), pagemapScan, uintptr(unsafe.Pointer(&arg)))
		runtime.KeepAlive(regions)
		if errno != 0 {
			return false, errno
		}
		for _, r := range regions[:n] {
			if r.categories&pageIsSwapped == 0 && r.categories&pageIsFile != 0 {
				continue // the file's own page, unchanged
			}
			private = append(private, r)
			count += int((r.end - r.start) / pageSize)
		}
		if arg.walkEnd <= start {
			return false, unix.EINVAL
		}
		start = arg.walkEnd
	}
	c.private = private
	if count > maxRestorePages {
		return false, nil
	}
	c.restore()
	c.faults, c.scanned, c.calls = faults, faults >= 0, 0
	return true, nil
}

// restore copies the image's bytes over the private pages the last scan found.
func (c *cowMemory) restore() {
	base := uint64(uintptr(unsafe.Pointer(&c.buf[0])))
	for _, r := range c.private {
		from, to := int(r.start-base), int(r.end-base)
		copy(c.buf[from:to], c.image.view[from:to])
	}
}

// processFaults is how many page faults the process has taken, in all its
// threads, the kernel's faults on its behalf (a read(2) into its memory, an
// madvise that populates it) included; -1 if getrusage fails.
//
// A page of a cowMemory becomes private to it only by a fault: its first
// write (a page of the image is mapped read-only until then, and one not yet
// touched is not mapped at all), or the write that brings it back from swap.
// A page already private is written without one, but the last scan found it.
// So while the count has not moved since that scan, the pages private now
// are the ones it found, and reset copies them back without scanning again:
// PAGEMAP_SCAN walks every page table entry of the image (8,192 for 32 MiB),
// about half of a reset's time, and two at once two and a half times as
// long. A fault anywhere in the process (another Guest, the Go heap growing)
// moves the count; counted tells this memory's faults apart.
func processFaults() int64 {
	return rusageFaults(unix.RUSAGE_SELF)
}

// threadFaults is how many page faults the calling thread has taken; -1 if
// getrusage fails.
func threadFaults() int64 { return rusageFaults(unix.RUSAGE_THREAD) }

func rusageFaults(who int) int64 {
	var ru unix.Rusage
	if unix.Getrusage(who, &ru) != nil {
		return -1
	}
	return ru.Minflt + ru.Majflt
}

// pagePrivate reads a pagemap entry: present and not file-backed (bit 63 set,
// bit 61 clear), or swapped out (bit 62) — either way a page of this instance
// alone, which may differ from the image.
func pagePrivate(entry []byte) bool {
	e := uint64(entry[0]) | uint64(entry[1])<<8 | uint64(entry[2])<<16 | uint64(entry[3])<<24 |
		uint64(entry[4])<<32 | uint64(entry[5])<<40 | uint64(entry[6])<<48 | uint64(entry[7])<<56
	return e&(1<<62) != 0 || (e&(1<<63) != 0 && e&(1<<61) == 0)
}

// touched returns the 4 KiB pages among the first size bytes of the memory
// that may differ from the image: in the image, the private ones; past it,
// every page present. ok is false when pagemap cannot tell (the caller then
// compares every page).
func (c *cowMemory) touched(size int) (pages []uint32, ok bool) {
	if c == nil || c.image.pagemap == nil || size > len(c.buf) {
		return nil, false
	}
	n := size / pageSize
	entries := make([]byte, n*8)
	base := uintptr(unsafe.Pointer(&c.buf[0]))
	if got, err := c.image.pagemap.ReadAt(entries, int64(base/pageSize*8)); err != nil || got != len(entries) {
		return nil, false
	}
	imagePages := c.imageSize / pageSize
	for p := 0; p < n; p++ {
		e := entries[p*8:]
		if p < imagePages && pagePrivate(e) || p >= imagePages && e[7]&(1<<7|1<<6) != 0 {
			pages = append(pages, uint32(p))
		}
	}
	return pages, true
}

// setLimit lowers the most the memory may grow to (a session's limit on a
// Guest taken from the pool); false when the memory is already larger.
func (c *cowMemory) setLimit(limit uint64) bool {
	if c.buf == nil || limit > uint64(len(c.buf)) || uint64(c.imageSize) > limit {
		return false
	}
	c.limit = limit
	return true
}

// populate makes the given pages (ascending page numbers, 4 KiB) this
// memory's own before the caller writes them: one madvise(MADV_POPULATE_WRITE)
// per run of consecutive pages instead of a page fault per page, which costs
// 30-60 microseconds on a busy 2-core virtual machine. A kernel without it
// (before 5.14) leaves the pages to fault.
func (c *cowMemory) populate(pages []uint32) {
	if c == nil {
		return
	}
	c.scanned = false // the pages it makes private are found by the next reset's scan
	for i := 0; i < len(pages); {
		j := i + 1
		for j < len(pages) && pages[j] == pages[j-1]+1 {
			j++
		}
		start, end := int(pages[i])*pageSize, (int(pages[j-1])+1)*pageSize
		if end > len(c.buf) {
			return
		}
		if unix.Madvise(c.buf[start:end], unix.MADV_POPULATE_WRITE) != nil {
			return
		}
		i = j
	}
}

// mapOver maps the image privately over the m.size bytes at base (another
// engine's memory: SharedImage) and returns a cowMemory of that range alone,
// which must never be freed: its owner unmaps it.
func (m *memfdImage) mapOver(base unsafe.Pointer) (*cowMemory, error) {
	if _, err := unix.MmapPtr(m.fd, 0, base, uintptr(m.size),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED); err != nil {
		return nil, fmt.Errorf("mmap image: %w", err)
	}
	return &cowMemory{buf: unsafe.Slice((*byte)(base), m.size), imageSize: m.size, image: m}, nil
}

// counted runs call, a call into the Guest, on one OS thread and adds the
// page faults that thread took meanwhile to c.calls.
//
// Everything that writes the Guest's memory during a run does so inside its
// calls, on the calling goroutine: the Guest's code, the host functions
// (wazero's WASI, the bridge's answers), the kernel on their behalf (a read(2)
// into the memory), and the Host placing a request (callWithBytes). Outside
// them only populate writes it, and it makes the next reset scan, as does
// handing out the memory (exposed). So the faults that can make a page of the
// memory private are those the calls' threads took during the calls; when
// there were none since the last scan, reset skips the scan even though the
// process took faults elsewhere meanwhile (the Go heap takes some in most
// runs two at once).
func (c *cowMemory) counted(call func()) {
	if c == nil {
		call()
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadFaults()
	counted := false
	defer func() {
		after := threadFaults()
		if !counted || before < 0 || after < 0 || c.calls < 0 {
			c.calls = -1 // a panic, or getrusage failed: scan as the process's count says
			return
		}
		c.calls += after - before
	}()
	call()
	counted = true
}

// exposed says the memory was handed out, to be written outside counted
// calls: the next reset scans.
func (c *cowMemory) exposed() {
	if c != nil {
		c.scanned = false
	}
}
