package engine

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run the embedded Guest on an Engine with a cache folder: the
// compiled code, the module it is compiled from, the image and its hot
// pages, each written by one New and trusted by the next only when sound.

// codeEntriesIn checks every compiled entry under the cache folder dir
// against its record, as New does, and returns how many there are.
func codeEntriesIn(dir string) (entries int, err error) {
	codeEntries(filepath.Join(dir, "code", "*"), func(path string, _ os.FileInfo) {
		if strings.HasSuffix(path, sumSuffix) {
			return
		}
		entries++
		if e := checkCodeEntry(path); e != nil && err == nil {
			err = fmt.Errorf("%s: %w", path, e)
		}
	})
	return entries, err
}

// TestCacheFolderDamaged: with every file of the cache folder damaged — the
// compiled Guest (a function offset and its machine code), its record, the
// module and the prepared image — New still works, and so do runs.
func TestCacheFolderDamaged(t *testing.T) {
	dir := t.TempDir()
	testEngine(t, Config{CacheDir: dir})
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
	e := testEngine(t, Config{CacheDir: dir})
	testRun(t, e, `result = 21 * inputs["n"]`, map[string]any{"n": 3}, `{"value":63}`)
	if sealed, err := codeEntriesIn(dir); err != nil || sealed != 1 {
		t.Errorf("%d compiled entries (want 1): %v", sealed, err)
	}
	again := testEngine(t, Config{CacheDir: dir})
	if made := again.Stats().InstancesMade; made != 0 {
		t.Errorf("the next New made %d instances: the image was not rewritten", made)
	}
	testRun(t, again, "result = 1", nil, `{"value":1}`)
}

// TestModuleCache: the first New stores the split and instrumented module in
// the cache folder, the next takes it from there, and a module file damaged
// in any of several ways is not trusted: New makes the module again, rewrites
// the file, and runs give the right values.
func TestModuleCache(t *testing.T) {
	dir := t.TempDir()
	if testEngine(t, Config{CacheDir: dir}).Stats().ModuleCached {
		t.Fatal("the first New found a module in an empty cache folder")
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "modules", "*.mod"))
	if len(paths) != 1 {
		t.Fatalf("module files after the first New: %v", paths)
	}
	path := paths[0]
	second := testEngine(t, Config{CacheDir: dir})
	if !second.Stats().ModuleCached {
		t.Fatal("the second New did not take the module from the cache folder")
	}
	testRun(t, second, `result = 21 * inputs["n"]`, map[string]any{"n": 3}, `{"value":63}`)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"one byte of the module changed", func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }},
		{"the flags changed", func(b []byte) []byte { b[16] ^= 0x01; return b }},
		{"cut short", func(b []byte) []byte { return b[:len(b)/3] }},
		{"one byte more", func(b []byte) []byte { return append(b, 0) }},
		{"not a module file", func([]byte) []byte { return []byte("broken") }},
		{"empty", func([]byte) []byte { return nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			damaged := c.damage(bytes.Clone(good))
			if err := os.WriteFile(path, damaged, 0o600); err != nil {
				t.Fatal(err)
			}
			e := testEngine(t, Config{CacheDir: dir})
			if e.Stats().ModuleCached {
				t.Fatal("New used a damaged module file")
			}
			testRun(t, e, `result = 21 * inputs["n"]`, map[string]any{"n": 3}, `{"value":63}`)
			rewritten, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("the module file was not rewritten: %v", err)
			}
			if !bytes.Equal(rewritten, good) {
				t.Fatal("the rewritten module file differs from the first one written")
			}
		})
	}
	m, err := loadModule(path)
	m.close()
	if err != nil {
		t.Fatal(err)
	}
}

// TestModuleCacheFresh: a Guest started from scratch needs the data segments
// the cached module does not hold; New reads them from the artifact.
func TestModuleCacheFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("starts CPython from scratch for a run")
	}
	dir := t.TempDir()
	testEngine(t, Config{CacheDir: dir})
	e := testEngine(t, Config{CacheDir: dir, Start: StartFresh})
	if !e.Stats().ModuleCached {
		t.Fatal("the module was not taken from the cache folder")
	}
	testRun(t, e, "result = 21 * 2", nil, `{"value":42}`)
}

// TestImageCache: New writes the image beside the compiled code, a second New
// loads it, and images nobody used for a long time are pruned.
func TestImageCache(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "images", "stale.img")
	os.MkdirAll(filepath.Dir(stale), 0o755)
	os.WriteFile(stale, []byte("old"), 0o644)
	old := time.Now().Add(-365 * 24 * time.Hour) // past the cache's two weeks
	os.Chtimes(stale, old, old)

	first := testEngine(t, Config{CacheDir: dir})
	images, _ := filepath.Glob(filepath.Join(dir, "images", "*.img"))
	if len(images) != 1 || images[0] == stale {
		t.Fatalf("images after the first New: %v", images)
	}
	madeFirst := first.Stats().InstancesMade // the one the image was taken from
	second := testEngine(t, Config{CacheDir: dir})
	if madeFirst != 1 || second.Stats().InstancesMade != 0 {
		t.Fatalf("instances made to prepare the image: first New %d, second %d (want 1, 0)", madeFirst, second.Stats().InstancesMade)
	}
	testRun(t, second, "result = 21", nil, `{"value":21}`)
	// The image is stored sparse: its zero pages are holes.
	info, _ := os.Stat(images[0])
	var st syscall.Stat_t
	if err := syscall.Stat(images[0], &st); err == nil && st.Blocks*512 >= info.Size() {
		t.Logf("image %d bytes, %d on disk: not sparse (the file system may not support holes)", info.Size(), st.Blocks*512)
	}
	// A broken cached image is replaced, not trusted.
	os.WriteFile(images[0], []byte("broken"), 0o644)
	third := testEngine(t, Config{CacheDir: dir})
	if third.Stats().InstancesMade != 1 {
		t.Fatal("a broken image was used")
	}
	testRun(t, third, "result = 1", nil, `{"value":1}`)
}

// TestImageCacheDamaged: a cached image with one byte changed, or cut short,
// is not trusted: New captures the image anew and rewrites the file, runs
// give the right values, and the next New loads the rewritten file.
func TestImageCacheDamaged(t *testing.T) {
	dir := t.TempDir()
	testEngine(t, Config{CacheDir: dir})
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
	flip := imageHeaderSize + WasmPageSize
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
			e := testEngine(t, Config{CacheDir: dir})
			if made := e.Stats().InstancesMade; made != 1 {
				t.Fatalf("instances made by New: %d, want 1 (the image captured anew)", made)
			}
			rewritten, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("the image was not rewritten: %v", err)
			}
			if bytes.Equal(rewritten, damaged) {
				t.Fatal("the damaged image is still there")
			}
			if _, err := readImage(path, e.cfg.MemoryLimit); err != nil {
				t.Fatalf("the rewritten image: %v", err)
			}
			testRun(t, e, `result = {"price": 21 * inputs["n"], "text": " ".join(sorted(["b", "a"]))}`, map[string]any{"n": 3},
				`{"value":{"price":63,"text":"a b"}}`)
			again := testEngine(t, Config{CacheDir: dir})
			if made := again.Stats().InstancesMade; made != 0 {
				t.Fatalf("the next New made %d instances: the rewritten image was not used", made)
			}
			testRun(t, again, "result = 21", nil, `{"value":21}`)
		})
	}
}

// TestHotPages: the first clean run of an Engine whose cache folder has no
// record of the image's hot pages records them; the next New reads them and
// its Guests get them before their first run; a damaged or hostile record is
// removed and recorded again.
func TestHotPages(t *testing.T) {
	if !COWSupported {
		t.Skip("hot pages are for copy-on-write Guests")
	}
	dir := t.TempDir()
	hotPaths := func() []string {
		paths, _ := filepath.Glob(filepath.Join(dir, "images", "*.pages"))
		return paths
	}
	first := testEngine(t, Config{CacheDir: dir, PoolSize: 1})
	if n := first.Stats().HotPages; n != 0 {
		t.Fatalf("%d hot pages in an empty cache folder", n)
	}
	if len(hotPaths()) != 0 {
		t.Fatal("hot pages recorded before any run")
	}
	testRun(t, first, "result = 21", nil, `{"value":21}`)
	paths := hotPaths()
	if len(paths) != 1 {
		t.Fatalf("hot-pages files after a run: %v", paths)
	}
	path := paths[0]
	imagePages := first.image.size / pageSize
	recorded := loadHotPages(path, imagePages)
	if len(recorded) == 0 || len(recorded) > 512 {
		t.Fatalf("%d hot pages recorded", len(recorded))
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	second := testEngine(t, Config{CacheDir: dir, PoolSize: 1})
	if n := second.Stats().HotPages; n != len(recorded) {
		t.Fatalf("the next New has %d hot pages, want %d", n, len(recorded))
	}
	for range 3 {
		testRun(t, second, `result = 21 * inputs["n"]`, map[string]any{"n": 3}, `{"value":63}`)
	}

	for name, file := range map[string][]byte{
		"garbage":   []byte("spine pages\x00 but not really"),
		"cut short": good[:len(good)-1],
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, file, 0o600); err != nil {
				t.Fatal(err)
			}
			e := testEngine(t, Config{CacheDir: dir, PoolSize: 1})
			if n := e.Stats().HotPages; n != 0 {
				t.Fatalf("%d hot pages from a damaged file", n)
			}
			if _, err := os.Stat(path); err == nil {
				t.Fatal("the damaged file is still there")
			}
			testRun(t, e, "result = 21", nil, `{"value":21}`)
			if got := loadHotPages(path, imagePages); len(got) == 0 {
				t.Fatal("the hot pages were not recorded again")
			}
		})
	}
}
