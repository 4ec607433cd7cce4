package spine

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestImageCache: New writes the image beside the compiled code, a second New
// loads it, and images nobody used for a long time are pruned.
func TestImageCache(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "images", "stale.img")
	os.MkdirAll(filepath.Dir(stale), 0o755)
	os.WriteFile(stale, []byte("old"), 0o644)
	old := time.Now().Add(-2 * imageMaxAge)
	os.Chtimes(stale, old, old)

	first := newRunner(t, testManifest(), &Options{CacheDir: dir, PoolSize: -1})
	images, _ := filepath.Glob(filepath.Join(dir, "images", "*.img"))
	if len(images) != 1 || images[0] == stale {
		t.Fatalf("images after the first New: %v", images)
	}
	madeFirst := first.instancesMade.Load() // the one the image was taken from
	second := newRunner(t, testManifest(), &Options{CacheDir: dir, PoolSize: -1})
	if madeFirst != 1 || second.instancesMade.Load() != 0 {
		t.Fatalf("instances made to prepare the image: first New %d, second %d (want 1, 0)", madeFirst, second.instancesMade.Load())
	}
	out := mustRun(t, second, `lookup(key="book")`, nil)
	if string(out.Value) != "21" {
		t.Fatalf("value %s", out.Value)
	}
	// The image is stored sparse: its zero pages are holes.
	info, _ := os.Stat(images[0])
	var st syscall.Stat_t
	if err := syscall.Stat(images[0], &st); err == nil && st.Blocks*512 >= info.Size() {
		t.Logf("image %d bytes, %d on disk: not sparse (the file system may not support holes)", info.Size(), st.Blocks*512)
	}
	// A broken cached image is replaced, not trusted.
	os.WriteFile(images[0], []byte("broken"), 0o644)
	third := newRunner(t, testManifest(), &Options{CacheDir: dir, PoolSize: -1})
	if third.instancesMade.Load() != 1 {
		t.Fatal("a broken image was used")
	}
	mustRun(t, third, "1", nil)
}

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
	pruneImages(dir, keep)
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
	data := make([]byte, 4*wasmPageSize)
	for i := range wasmPageSize {
		data[i] = byte(i*7 + 1)
		data[2*wasmPageSize+i] = byte(i >> 8)
	}
	return data
}

// TestImageFile: an image read back is the image written, and any damage to
// the file (one byte anywhere, a truncation, an extension, the old header-less
// format) makes readImage fail and remove it.
func TestImageFile(t *testing.T) {
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
		"truncated by a page":   func(b []byte) []byte { return b[:len(b)-wasmPageSize] },
		"header only":           func(b []byte) []byte { return b[:imageHeaderSize] },
		"half a header":         func(b []byte) []byte { return b[:imageHeaderSize/2] },
		"empty":                 func(b []byte) []byte { return nil },
		"a byte more":           func(b []byte) []byte { return append(b, 0) },
		"a page more":           func(b []byte) []byte { return append(b, make([]byte, wasmPageSize)...) },
		"old format, no header": func(b []byte) []byte { return b[imageHeaderSize:] },
		"longer length, a page more": func(b []byte) []byte {
			b[16+2]++ // the length grows by 64 KiB, as the file does
			return append(b, make([]byte, wasmPageSize)...)
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
	if _, err := readImage(path, uint64(len(data)-wasmPageSize)); err == nil {
		t.Error("an image over the limit was read")
	}
	// Missing: an error, nothing else.
	if _, err := readImage(filepath.Join(dir, "missing.img"), 1<<30); !os.IsNotExist(err) {
		t.Errorf("missing image: %v", err)
	}
}

// TestImageCacheDamaged: a cached image with one byte changed, or cut short,
// is not trusted: New captures the image anew and rewrites the file, runs
// give the right values, and the next New loads the rewritten file.
func TestImageCacheDamaged(t *testing.T) {
	dir := t.TempDir()
	opts := func() *Options { return &Options{CacheDir: dir, PoolSize: -1} }
	newRunner(t, testManifest(), opts())
	images, _ := filepath.Glob(filepath.Join(dir, "images", "*.img"))
	if len(images) != 1 {
		t.Fatalf("images: %v", images)
	}
	path := images[0]
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A byte in the first data page after the one at address 0 (the image
	// starts with zeros), so that the change is in bytes CPython uses.
	flip := imageHeaderSize + wasmPageSize
	for flip < len(good) && good[flip] == 0 {
		flip++
	}
	for _, c := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"one byte changed", func(b []byte) []byte { b[flip] ^= 0x20; return b }},
		{"cut short", func(b []byte) []byte { return b[:len(b)/2] }},
	} {
		t.Run(c.name, func(t *testing.T) {
			damaged := c.damage(bytes.Clone(good))
			if err := os.WriteFile(path, damaged, 0o644); err != nil {
				t.Fatal(err)
			}
			r := newRunner(t, testManifest(), opts())
			if made := r.instancesMade.Load(); made != 1 {
				t.Fatalf("instances made by New: %d, want 1 (the image captured anew)", made)
			}
			rewritten, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("the image was not rewritten: %v", err)
			}
			if bytes.Equal(rewritten, damaged) {
				t.Fatal("the damaged image is still there")
			}
			if _, err := readImage(path, r.opts.MemoryLimit); err != nil {
				t.Fatalf("the rewritten image: %v", err)
			}
			out := mustRun(t, r, `{"price": lookup(key="book") * inputs["n"], "text": " ".join(sorted(["b", "a"]))}`, map[string]any{"n": 3})
			if string(out.Value) != `{"price":63,"text":"a b"}` {
				t.Fatalf("value %s", out.Value)
			}
			again := newRunner(t, testManifest(), opts())
			if made := again.instancesMade.Load(); made != 0 {
				t.Fatalf("the next New made %d instances: the rewritten image was not used", made)
			}
			if out := mustRun(t, again, `lookup(key="book")`, nil); string(out.Value) != "21" {
				t.Fatalf("value %s", out.Value)
			}
		})
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
