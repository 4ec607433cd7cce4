package spine

import (
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
