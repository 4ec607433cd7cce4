package spine

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/spine-run/spine/internal/engine"
)

// TestImageCache: New writes the image beside the compiled code, a second New
// loads it, and images nobody used for a long time are pruned.
func TestImageCache(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "images", "stale.img")
	os.MkdirAll(filepath.Dir(stale), 0o755)
	os.WriteFile(stale, []byte("old"), 0o644)
	old := time.Now().Add(-365 * 24 * time.Hour) // past the cache's two weeks
	os.Chtimes(stale, old, old)

	first := newRunner(t, testManifest(), &Options{CacheDir: dir, PoolSize: -1})
	images, _ := filepath.Glob(filepath.Join(dir, "images", "*.img"))
	if len(images) != 1 || images[0] == stale {
		t.Fatalf("images after the first New: %v", images)
	}
	madeFirst := first.Stats().InstancesMade // the one the image was taken from
	second := newRunner(t, testManifest(), &Options{CacheDir: dir, PoolSize: -1})
	if madeFirst != 1 || second.Stats().InstancesMade != 0 {
		t.Fatalf("instances made to prepare the image: first New %d, second %d (want 1, 0)", madeFirst, second.Stats().InstancesMade)
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
	if third.Stats().InstancesMade != 1 {
		t.Fatal("a broken image was used")
	}
	mustRun(t, third, "1", nil)
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
	flip := engine.ImageHeaderSize + engine.WasmPageSize
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
			if made := r.Stats().InstancesMade; made != 1 {
				t.Fatalf("instances made by New: %d, want 1 (the image captured anew)", made)
			}
			rewritten, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("the image was not rewritten: %v", err)
			}
			if bytes.Equal(rewritten, damaged) {
				t.Fatal("the damaged image is still there")
			}
			if err := engine.CheckImageFile(path, r.opts.MemoryLimit); err != nil {
				t.Fatalf("the rewritten image: %v", err)
			}
			out := mustRun(t, r, `{"price": lookup(key="book") * inputs["n"], "text": " ".join(sorted(["b", "a"]))}`, map[string]any{"n": 3})
			if string(out.Value) != `{"price":63,"text":"a b"}` {
				t.Fatalf("value %s", out.Value)
			}
			again := newRunner(t, testManifest(), opts())
			if made := again.Stats().InstancesMade; made != 0 {
				t.Fatalf("the next New made %d instances: the rewritten image was not used", made)
			}
			if out := mustRun(t, again, `lookup(key="book")`, nil); string(out.Value) != "21" {
				t.Fatalf("value %s", out.Value)
			}
		})
	}
}
