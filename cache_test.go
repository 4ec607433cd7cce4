package spine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spine-run/spine/internal/engine"
)

// TestCacheDamagedRunner: with every file of the cache folder damaged — the
// compiled Guest (a function offset and its machine code), its record and
// the prepared image — New still works, and so do runs.
func TestCacheDamagedRunner(t *testing.T) {
	dir := t.TempDir()
	opts := func() *Options { return &Options{CacheDir: dir, PoolSize: -1} }
	newRunner(t, testManifest(), opts())
	var files []string
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			files = append(files, path)
		}
		return nil
	})
	if len(files) < 3 {
		t.Fatalf("cache files: %v", files)
	}
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x01
		if len(b) > 24 {
			b[24] ^= 0x01 // in a compiled entry, a function's offset
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := newRunner(t, testManifest(), opts())
	if out := mustRun(t, r, `lookup(key="book") * inputs["n"]`, map[string]any{"n": 3}); string(out.Value) != "63" {
		t.Fatalf("value %s", out.Value)
	}
	if sealed, err := engine.CheckCodeCache(dir); err != nil || sealed != 1 {
		t.Errorf("%d compiled entries (want 1): %v", sealed, err)
	}
	again := newRunner(t, testManifest(), opts())
	if made := again.Stats().InstancesMade; made != 0 {
		t.Errorf("the next New made %d instances: the image was not rewritten", made)
	}
	mustRun(t, again, "1", nil)
}
