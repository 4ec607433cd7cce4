package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/spine-run/spine/internal/atomicfile"
)

// A Guest started copy-on-write from the image has none of the image's pages
// of its own: each page its first run writes costs a page fault, which copies
// the page — 30-60 microseconds each on a busy virtual machine, where a first
// run writes some 300 of them. The hot pages are those pages: the first run in
// a process that finds no record of them records them in the cache folder,
// beside the image (images/<key>.pages), and from then on every Guest about to
// make its first run gets them with one madvise(MADV_POPULATE_WRITE) per run
// of consecutive pages. Only a Guest about to run gets them, not one waiting
// in the pool, so an idle pool stays as small as it was.
//
// A hot-pages file is a header of hotHeaderSize bytes, then the page numbers:
//
//	offset  0  hotMagic, 12 bytes
//	offset 12  hotFileVersion, uint32 little-endian
//	offset 16  the number of pages, uint32 little-endian, 1 to maxHotPages
//	offset 20  CRC-32C of the whole file, these four bytes counted as zero, uint32 little-endian
//	offset 24  the page numbers (4 KiB pages of the image), uint32 little-endian, ascending
//
// A file that is not whole and intact, or names a page outside the image, is
// removed and recorded again; the pages are only ever a hint.
const (
	hotMagic       = "spine pages\x00"
	hotFileVersion = 1
	hotHeaderSize  = 24
	maxHotPages    = 512
)

// hotPath is where the cache folder dir keeps the hot pages of the image
// named key.
func hotPath(dir, key string) string {
	return filepath.Join(dir, "images", key+".pages")
}

// encodeHotPages returns the hot-pages file holding pages (ascending, at most
// maxHotPages).
func encodeHotPages(pages []uint32) []byte {
	b := make([]byte, hotHeaderSize, hotHeaderSize+4*len(pages))
	copy(b, hotMagic)
	binary.LittleEndian.PutUint32(b[12:], hotFileVersion)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(pages)))
	for _, p := range pages {
		b = binary.LittleEndian.AppendUint32(b, p)
	}
	binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(b, castagnoli))
	return b
}

// decodeHotPages returns the pages a hot-pages file holds, each below limit;
// an error when the file is not a whole, intact one of this format.
func decodeHotPages(file []byte, limit int) ([]uint32, error) {
	if len(file) < hotHeaderSize {
		return nil, errors.New("no header")
	}
	if string(file[:len(hotMagic)]) != hotMagic || binary.LittleEndian.Uint32(file[12:]) != hotFileVersion {
		return nil, errors.New("not a hot-pages file of this format")
	}
	n := binary.LittleEndian.Uint32(file[16:])
	if n == 0 || n > maxHotPages || len(file) != hotHeaderSize+4*int(n) {
		return nil, fmt.Errorf("%d bytes for %d pages", len(file), n)
	}
	var blank [4]byte
	sum := crc32.Update(0, castagnoli, file[:20])
	sum = crc32.Update(sum, castagnoli, blank[:])
	sum = crc32.Update(sum, castagnoli, file[hotHeaderSize:])
	if sum != binary.LittleEndian.Uint32(file[20:]) {
		return nil, errors.New("checksum mismatch")
	}
	pages := make([]uint32, n)
	for i := range pages {
		pages[i] = binary.LittleEndian.Uint32(file[hotHeaderSize+4*i:])
		if int64(pages[i]) >= int64(limit) || i > 0 && pages[i] <= pages[i-1] {
			return nil, fmt.Errorf("page %d out of order or outside the image", pages[i])
		}
	}
	return pages, nil
}

// loadHotPages returns the hot pages recorded at path for an image of limit
// pages, or nil; a file it cannot trust is removed.
func loadHotPages(path string, limit int) []uint32 {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || info.Size() > hotHeaderSize+4*maxHotPages {
		removeIfSame(f, path)
		return nil
	}
	file := make([]byte, info.Size())
	if _, err := f.ReadAt(file, 0); err != nil {
		removeIfSame(f, path)
		return nil
	}
	pages, err := decodeHotPages(file, limit)
	if err != nil {
		removeIfSame(f, path)
		return nil
	}
	return pages
}

// hotPagesOf returns the pages of the image a Guest has made its own, at most
// maxHotPages of them (the lowest), or nil when it cannot tell.
func hotPagesOf(inst *Instance) []uint32 {
	if inst.cow == nil || inst.img == nil {
		return nil
	}
	size := inst.img.size
	pages, ok := inst.cow.touched(size)
	if !ok || len(pages) == 0 {
		return nil
	}
	return pages[:min(len(pages), maxHotPages)]
}

// recordHotPages stores the pages the first Guest released after a clean
// run made its own, once per engine, when New found no record of them.
func (e *Engine) recordHotPages(inst *Instance) {
	if e.hotPath == "" || !e.hotRecorded.CompareAndSwap(false, true) {
		return
	}
	if pages := hotPagesOf(inst); pages != nil {
		_ = atomicfile.Write(e.hotPath, encodeHotPages(pages), atomicfile.Options{}) // a hint: failing costs only time
	}
}

// prefault gives a Guest about to make its first run the hot pages.
func (e *Engine) prefault(inst *Instance) {
	if inst.ran {
		return
	}
	inst.ran = true
	inst.cow.populate(e.hot)
}
