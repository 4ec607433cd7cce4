package engine

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPruneImagesKeepsTheLastUsed(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	var paths []string
	for i := 0; i < maxCachedImages+3; i++ {
		p := filepath.Join(dir, fmt.Sprintf("%02d.img", i))
		os.WriteFile(p, []byte("x"), 0o644)
		used := now.Add(-time.Duration(i) * time.Hour) // 00 used last
		os.Chtimes(p, used, used)
		paths = append(paths, p)
	}
	keep := paths[len(paths)-1] // the one just written, even if oldest
	orphan, kept := filepath.Join(dir, "gone.pages"), filepath.Join(dir, "00.pages")
	os.WriteFile(orphan, []byte("x"), 0o644)
	os.WriteFile(kept, []byte("x"), 0o644)
	pruneImages(dir, keep)
	if _, err := os.Stat(orphan); err == nil {
		t.Error("the hot pages of an image not there were kept")
	}
	if _, err := os.Stat(kept); err != nil {
		t.Error("the hot pages of a kept image were removed")
	}
	for i, p := range paths {
		_, err := os.Stat(p)
		wantKept := i < maxCachedImages-1 || p == keep
		if (err == nil) != wantKept {
			t.Errorf("%s: kept %v, want %v", filepath.Base(p), err == nil, wantKept)
		}
	}
}

// testImage is four pages: data, zeros (a hole on disk), data, zeros.
func testImage() []byte {
	data := make([]byte, 4*WasmPageSize)
	for i := range WasmPageSize {
		data[i] = byte(i*7 + 1)
		data[2*WasmPageSize+i] = byte(i >> 8)
	}
	return data
}

// TestImageFile: an image read back is the image written, and any damage to
// the file (one byte anywhere, a truncation, an extension, the image without
// its header) makes loading it fail and removes it — read as bytes, and
// copied into a memfd for copy-on-write, which reads only the file's data.
func TestImageFile(t *testing.T) {
	t.Run("bytes", func(t *testing.T) { testImageFile(t, false) })
	if COWSupported {
		t.Run("memfd", func(t *testing.T) { testImageFile(t, true) })
	}
}

func testImageFile(t *testing.T, cow bool) {
	readImage := func(path string, limit uint64) ([]byte, error) {
		img, err := loadImage(path, limit, cow)
		if err != nil {
			return nil, err
		}
		defer img.close()
		if cow {
			return bytes.Clone(img.memfd.view), nil
		}
		return img.data, nil
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "x.img")
	data := testImage()
	if err := writeImage(path, data); err != nil {
		t.Fatal(err)
	}
	got, err := readImage(path, 1<<30)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v (equal %v)", err, bytes.Equal(got, data))
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(good) != imageHeaderSize+len(data) {
		t.Fatalf("file of %d bytes", len(good))
	}
	if temps, _ := filepath.Glob(filepath.Join(dir, imageTempPrefix+"*")); len(temps) != 0 {
		t.Errorf("temporary files left: %v", temps)
	}

	flip := func(off int) func([]byte) []byte {
		return func(b []byte) []byte { b[off] ^= 0x01; return b }
	}
	damage := map[string]func([]byte) []byte{
		"truncated by a byte":   func(b []byte) []byte { return b[:len(b)-1] },
		"truncated by a page":   func(b []byte) []byte { return b[:len(b)-WasmPageSize] },
		"header only":           func(b []byte) []byte { return b[:imageHeaderSize] },
		"half a header":         func(b []byte) []byte { return b[:imageHeaderSize/2] },
		"empty":                 func(b []byte) []byte { return nil },
		"a byte more":           func(b []byte) []byte { return append(b, 0) },
		"a page more":           func(b []byte) []byte { return append(b, make([]byte, WasmPageSize)...) },
		"old format, no header": func(b []byte) []byte { return b[imageHeaderSize:] },
		"longer length, a page more": func(b []byte) []byte {
			b[16+2]++ // the length grows by 64 KiB, as the file does
			return append(b, make([]byte, WasmPageSize)...)
		},
	}
	// One flipped byte in every field of the header and through the image,
	// in its data pages and its holes.
	for off := 0; off < imageHeaderSize; off += 3 {
		damage[fmt.Sprintf("byte %d flipped", off)] = flip(off)
	}
	for off := imageHeaderSize; off < len(good); off += 4093 {
		damage[fmt.Sprintf("byte %d flipped", off)] = flip(off)
	}
	damage["last byte flipped"] = flip(len(good) - 1)
	for name, f := range damage {
		if err := os.WriteFile(path, f(bytes.Clone(good)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readImage(path, 1<<30); err == nil {
			t.Errorf("%s: read without an error", name)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s: the file was not removed (%v)", name, err)
		}
	}

	// Larger than the memory limit: refused.
	os.WriteFile(path, good, 0o644)
	if _, err := readImage(path, uint64(len(data)-WasmPageSize)); err == nil {
		t.Error("an image over the limit was read")
	}
	// Missing: an error, nothing else.
	if _, err := readImage(filepath.Join(dir, "missing.img"), 1<<30); !os.IsNotExist(err) {
		t.Errorf("missing image: %v", err)
	}
}

func TestPruneImagesTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, imageTempPrefix+"dead")
	live := filepath.Join(dir, imageTempPrefix+"live")
	for _, p := range []string{dead, live} {
		os.WriteFile(p, []byte("x"), 0o644)
	}
	old := time.Now().Add(-2 * tempMaxAge)
	os.Chtimes(dead, old, old)
	pruneImages(dir, "")
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Error("a dead writer's temporary file is still there")
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a recent temporary file was removed: %v", err)
	}
}

// BenchmarkImageRead reads a 32 MiB image (a third of it data) from the
// disk cache, its checksum checked.
func BenchmarkImageRead(b *testing.B) {
	data := make([]byte, 32<<20)
	for i := 0; i < len(data)/3; i++ {
		data[i] = byte(i*31 + i>>12)
	}
	path := filepath.Join(b.TempDir(), "x.img")
	if err := writeImage(path, data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := readImage(path, 1<<30); err != nil {
			b.Fatal(err)
		}
	}
}

// TestImageFirstWriterStays: two captures of one key differ, and a
// session's snapshot is a difference from its image, so a second image
// written under a key does not replace the first, which every Runner then
// takes.
func TestImageFirstWriterStays(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.img")
	first, second := testImage(), testImage()
	second[0] ^= 0xff
	if err := writeImage(path, first); err != nil {
		t.Fatal(err)
	}
	if err := writeImage(path, second); err != nil {
		t.Fatal(err)
	}
	got, err := readImage(path, 1<<30)
	if err != nil || !bytes.Equal(got, first) {
		t.Fatalf("the image under the key is not the first written (%v)", err)
	}
	if temps, _ := filepath.Glob(filepath.Join(dir, imageTempPrefix+"*")); len(temps) != 0 {
		t.Errorf("temporary files left: %v", temps)
	}
}

// FuzzLoadImage: any file in the image cache is loaded as the image it
// holds or refused, never a panic, and read as bytes and copied into a memfd
// it gives the same answer.
func FuzzLoadImage(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "good.img")
	if err := writeImage(good, testImage()); err != nil {
		f.Fatal(err)
	}
	valid, err := os.ReadFile(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:imageHeaderSize])
	f.Add(append(bytes.Clone(valid), 0))
	f.Fuzz(func(t *testing.T, file []byte) {
		path := filepath.Join(t.TempDir(), "x.img")
		var got [2][]byte
		var errs [2]error
		for i, cow := range []bool{false, true} {
			if cow && !COWSupported {
				got[i], errs[i] = got[0], errs[0]
				continue
			}
			if err := os.WriteFile(path, file, 0o644); err != nil {
				t.Fatal(err)
			}
			img, err := loadImage(path, 1<<30, cow)
			if errs[i] = err; err != nil {
				continue
			}
			if cow {
				got[i] = bytes.Clone(img.memfd.view)
			} else {
				got[i] = img.data
			}
			img.close()
		}
		if (errs[0] == nil) != (errs[1] == nil) || !bytes.Equal(got[0], got[1]) {
			t.Fatalf("as bytes: %v; in a memfd: %v (the same image: %v)", errs[0], errs[1], bytes.Equal(got[0], got[1]))
		}
	})
}

// readImage returns the bytes of the image cached at path (see loadImage).
func readImage(path string, limit uint64) ([]byte, error) {
	img, err := loadImage(path, limit, false)
	if err != nil {
		return nil, err
	}
	return img.data, nil
}
