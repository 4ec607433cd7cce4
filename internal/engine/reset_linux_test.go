//go:build linux

package engine

import (
	"bytes"
	"os"
	"testing"
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
			for p := round; p < len(data)/pageSize; p += 2 { // every other page: one run each
				buf[p*pageSize+round] ^= 0xff
			}
			_ = buf[5*pageSize] // a read: the file's page, not private
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

// TestResetWithoutScan: while the process takes no page fault, a reset
// restores the pages the last scan found private without scanning again; a
// write that makes another page private, by the Guest's code or by the
// kernel (a read(2) into the memory), is a fault, and the next reset scans
// and restores that page too.
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
	check := func(step string) {
		t.Helper()
		if err := mem.reset(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, data) {
			t.Fatalf("%s: the image differs after reset", step)
		}
	}
	for p := 0; p < 8; p++ {
		buf[p*pageSize*2] ^= 0xff
	}
	check("first writes")
	if !mem.scanned {
		t.Skip("no PAGEMAP_SCAN here")
	}
	skipped := false
	for i := 0; i < 20 && !skipped; i++ { // a fault elsewhere in the process (the Go heap) makes a reset scan
		before := mem.scans
		for p := 0; p < 8; p++ {
			buf[p*pageSize*2+1] ^= 0xff // pages already private: no fault
		}
		check("writes to private pages")
		skipped = mem.scans == before
	}
	if !skipped {
		t.Fatal("every reset scanned: the fault count never stood still")
	}
	buf[3*pageSize] ^= 0xff // a page not yet private: a fault
	check("a write to a new page")
	f, err := os.CreateTemp(t.TempDir(), "page")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{0xee}, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(buf[5*pageSize:5*pageSize+100], 0); err != nil { // the kernel writes the page
		t.Fatal(err)
	}
	if buf[5*pageSize] != 0xee {
		t.Fatal("the read did not land")
	}
	check("a read(2) into a new page")
}
