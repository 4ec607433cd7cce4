//go:build linux

package engine

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestResetRestoresWrittenPages: after writes scattered over the image (more
// runs of pages than one PAGEMAP_SCAN answer holds) and past it, reset brings
// the image's part back byte for byte, with PAGEMAP_SCAN and with the
// pagemap read.
func TestResetRestoresWrittenPages(t *testing.T) {
	data := make([]byte, 64*WasmPageSize) // 1,024 pages of 4 KiB
	for i := range data {
		if i/pageSize%3 != 0 { // every third page a hole
			data[i] = byte(i*31 + 7)
		}
	}
	img, err := newMemfdImage(data)
	if err != nil {
		t.Fatal(err)
	}
	defer img.close()
	for _, scan := range []bool{true, false} {
		noPagemapScan.Store(!scan)
		mem, err := img.newMemory(uint64(2 * len(data)))
		if err != nil {
			t.Fatal(err)
		}
		buf := mem.Reallocate(uint64(2 * len(data)))
		for round := 0; round < 3; round++ {
			mem.counted(func() { // as the Guest's calls write
				for p := round; p < len(data)/pageSize; p += 2 { // every other page: one run each
					buf[p*pageSize+round] ^= 0xff
				}
				_ = buf[5*pageSize] // a read: the file's page, not private
			})
			if err := mem.reset(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf[:len(data)], data) {
				t.Fatalf("scan %v, round %d: the image differs after reset", scan, round)
			}
		}
		if scan && noPagemapScan.Load() {
			t.Log("no PAGEMAP_SCAN here: the pagemap read was tested twice")
		}
		mem.Free()
	}
	noPagemapScan.Store(false)
}

// TestResetWithoutScan: a reset restores the pages the last scan found
// private without scanning again while the Guest's calls (here, functions run
// as counted calls) took no page fault, even though the process took some
// elsewhere meanwhile; a write in a call that makes another page private, by
// the Guest's code or by the kernel (a read(2) into the memory), is a fault of
// the call's thread, and the next reset scans and restores that page too. So
// does a write outside any call once the memory was handed out (exposed), and
// every write while a call's faults could not be counted.
func TestResetWithoutScan(t *testing.T) {
	data := make([]byte, 16*WasmPageSize)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	img, err := newMemfdImage(data)
	if err != nil {
		t.Fatal(err)
	}
	defer img.close()
	mem, err := img.newMemory(uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Free()
	buf := mem.Reallocate(uint64(len(data)))
	check := func(step string, scan bool) {
		t.Helper()
		before := mem.scans
		if err := mem.reset(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, data) {
			t.Fatalf("%s: the image differs after reset", step)
		}
		if scanned := mem.scans > before; scanned != scan && mem.scanned {
			t.Fatalf("%s: scanned %v, want %v", step, scanned, scan)
		}
	}
	mem.counted(func() {
		for p := 0; p < 8; p++ {
			buf[p*pageSize*2] ^= 0xff
		}
	})
	check("first writes", true)
	if !mem.scanned {
		t.Skip("no PAGEMAP_SCAN here")
	}
	elsewhere, err := unix.Mmap(-1, 0, 64*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(elsewhere)
	for round := 0; round < 4; round++ {
		faults := processFaults()
		elsewhere[round*16*pageSize] = 1 // a fault of the process, outside the Guest's calls
		if processFaults() == faults {
			t.Fatal("a write to a new page was no page fault")
		}
		mem.counted(func() {
			for p := 0; p < 8; p++ {
				buf[p*pageSize*2+1] ^= 0xff // pages already private: no fault
			}
		})
		if mem.calls != 0 {
			continue // the call's thread took a fault of its own (the Go runtime's): it scans
		}
		check("writes to private pages, a fault elsewhere", false)
	}
	mem.counted(func() { buf[3*pageSize] ^= 0xff }) // a page not yet private: a fault
	check("a write to a new page", true)
	f, err := os.CreateTemp(t.TempDir(), "page")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{0xee}, 100)); err != nil {
		t.Fatal(err)
	}
	mem.counted(func() {
		if _, err = f.ReadAt(buf[5*pageSize:5*pageSize+100], 0); err != nil { // the kernel writes the page
			return
		}
		if buf[5*pageSize] != 0xee {
			err = os.ErrInvalid
		}
	})
	if err != nil {
		t.Fatalf("the read did not land: %v", err)
	}
	check("a read(2) into a new page", true)
	mem.exposed()
	buf[7*pageSize] ^= 0xff // outside any call, after the memory was handed out
	check("a write to an exposed memory", true)
	mem.calls = -1
	buf[9*pageSize] ^= 0xff
	if processFaults() == mem.faults {
		t.Fatal("a write to a new page was no page fault")
	}
	check("a write while the calls' faults are unknown", true)
}
