package spine

import (
	"os"
	"path/filepath"
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
	// A broken cached image is replaced, not trusted.
	os.WriteFile(images[0], []byte("broken"), 0o644)
	third := newRunner(t, testManifest(), &Options{CacheDir: dir, PoolSize: -1})
	if third.instancesMade.Load() != 1 {
		t.Fatal("a broken image was used")
	}
	mustRun(t, third, "1", nil)
}
