package spine

import (
	"os"
	"testing"

	"github.com/spine-run/spine/internal/engine"
)

// TestHotPages: the first clean run of a Runner whose cache folder has no
// record of the image's hot pages records them; the next New reads them and
// its Guests get them before their first run; a damaged or hostile record is
// removed and recorded again.
func TestHotPages(t *testing.T) {
	if !engine.COWSupported {
		t.Skip("hot pages are for copy-on-write Guests")
	}
	dir := t.TempDir()
	opts := func() *Options { return &Options{CacheDir: dir, PoolSize: 1} }
	first := newRunner(t, testManifest(), opts())
	if n := first.engine.Stats().HotPages; n != 0 {
		t.Fatalf("%d hot pages in an empty cache folder", n)
	}
	if len(engine.HotPaths(dir)) != 0 {
		t.Fatal("hot pages recorded before any run")
	}
	mustRun(t, first, `lookup(key="book")`, nil)
	paths := engine.HotPaths(dir)
	if len(paths) != 1 {
		t.Fatalf("hot-pages files after a run: %v", paths)
	}
	path := paths[0]
	imagePages := len(first.engine.Image()) / 4096
	recorded := engine.HotPagesIn(path, imagePages)
	if len(recorded) == 0 || len(recorded) > 512 {
		t.Fatalf("%d hot pages recorded", len(recorded))
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	second := newRunner(t, testManifest(), opts())
	if n := second.engine.Stats().HotPages; n != len(recorded) {
		t.Fatalf("the next New has %d hot pages, want %d", n, len(recorded))
	}
	for range 3 {
		if out := mustRun(t, second, `lookup(key="book") * inputs["n"]`, map[string]any{"n": 3}); string(out.Value) != "63" {
			t.Fatalf("value %s", out.Value)
		}
	}

	for name, file := range map[string][]byte{
		"garbage":   []byte("spine pages\x00 but not really"),
		"cut short": good[:len(good)-1],
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, file, 0o600); err != nil {
				t.Fatal(err)
			}
			r := newRunner(t, testManifest(), opts())
			if n := r.engine.Stats().HotPages; n != 0 {
				t.Fatalf("%d hot pages from a damaged file", n)
			}
			if _, err := os.Stat(path); err == nil {
				t.Fatal("the damaged file is still there")
			}
			if out := mustRun(t, r, `lookup(key="book")`, nil); string(out.Value) != "21" {
				t.Fatalf("value %s", out.Value)
			}
			if got := engine.HotPagesIn(path, imagePages); len(got) == 0 {
				t.Fatal("the hot pages were not recorded again")
			}
		})
	}
}
