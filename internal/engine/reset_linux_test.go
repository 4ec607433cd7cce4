//go:build linux

package engine

import (
	"bytes"
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
