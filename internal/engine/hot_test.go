package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestHotPagesFile: a hot-pages file read back holds the pages written, and
// a hostile one — any byte changed, cut short, too long, too many pages,
// pages out of order, repeated or outside the image, even with a checksum
// that matches — is refused and removed.
func TestHotPagesFile(t *testing.T) {
	const limit = 100
	pages := []uint32{0, 1, 2, 7, 99}
	good := encodeHotPages(pages)
	if got, err := decodeHotPages(good, limit); err != nil || !slices.Equal(got, pages) {
		t.Fatalf("read back %v: %v", got, err)
	}
	// resum gives a file a matching checksum again.
	resum := func(b []byte) []byte {
		if len(b) >= hotHeaderSize {
			clear(b[20:24])
			binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(b, castagnoli))
		}
		return b
	}
	many := make([]uint32, maxHotPages+1)
	for i := range many {
		many[i] = uint32(i)
	}
	hostile := map[string][]byte{
		"empty":                   nil,
		"header only":             good[:hotHeaderSize],
		"one byte more":           append(bytes.Clone(good), 0),
		"one byte more, resummed": resum(append(bytes.Clone(good), 0)),
		"too many pages":          encodeHotPages(many),
		"no pages":                encodeHotPages(nil),
		"out of order":            encodeHotPages([]uint32{5, 3}),
		"repeated":                encodeHotPages([]uint32{5, 5}),
		"outside the image":       encodeHotPages([]uint32{1, limit}),
		"count larger than the file": resum(func() []byte {
			b := bytes.Clone(good)
			binary.LittleEndian.PutUint32(b[16:], 1<<31)
			return b
		}()),
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		hostile[fmt.Sprintf("byte %d changed", i)] = b
	}
	for n := range len(good) {
		hostile[fmt.Sprintf("cut to %d bytes", n)] = good[:n]
	}
	path := filepath.Join(t.TempDir(), "x.pages")
	for name, file := range hostile {
		if got, err := decodeHotPages(file, limit); err == nil {
			t.Errorf("%s: decoded %v", name, got)
		}
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := loadHotPages(path, limit); got != nil {
			t.Errorf("%s: loaded %v", name, got)
		}
		if _, err := os.Stat(path); err == nil {
			t.Errorf("%s: not removed", name)
		}
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := loadHotPages(path, limit); !slices.Equal(got, pages) {
		t.Fatalf("loaded %v", got)
	}
}

// FuzzHotPages: any bytes are pages within the limit, ascending and at most
// maxHotPages of them, exactly as encodeHotPages writes them, or refused.
func FuzzHotPages(f *testing.F) {
	f.Add(encodeHotPages([]uint32{0, 1, 2, 7, 99}), 100)
	f.Add(encodeHotPages([]uint32{3}), 1)
	f.Fuzz(func(t *testing.T, file []byte, limit int) {
		pages, err := decodeHotPages(file, limit)
		if err != nil {
			return
		}
		if len(pages) == 0 || len(pages) > maxHotPages || !slices.IsSorted(pages) || int64(pages[len(pages)-1]) >= int64(limit) {
			t.Fatalf("accepted %v for a limit of %d", pages, limit)
		}
		if !bytes.Equal(encodeHotPages(pages), file) {
			t.Fatal("accepted a file encodeHotPages would not write")
		}
	})
}
