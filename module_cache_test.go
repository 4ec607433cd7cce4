package spine

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/spine-run/spine/internal/engine"
)

// TestModuleCache: the first New stores the split and instrumented module in
// the cache folder, the next takes it from there, and a module file damaged
// in any of several ways is not trusted: New makes the module again, rewrites
// the file, and runs give the right values.
func TestModuleCache(t *testing.T) {
	dir := t.TempDir()
	opts := func() *Options { return &Options{CacheDir: dir, PoolSize: -1} }
	first := newRunner(t, testManifest(), opts())
	if first.engine.Stats().ModuleCached {
		t.Fatal("the first New found a module in an empty cache folder")
	}
	paths := engine.ModulePaths(dir)
	if len(paths) != 1 {
		t.Fatalf("module files after the first New: %v", paths)
	}
	path := paths[0]
	second := newRunner(t, testManifest(), opts())
	if !second.engine.Stats().ModuleCached {
		t.Fatal("the second New did not take the module from the cache folder")
	}
	if out := mustRun(t, second, `lookup(key="book") * inputs["n"]`, map[string]any{"n": 3}); string(out.Value) != "63" {
		t.Fatalf("value %s", out.Value)
	}
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
			r := newRunner(t, testManifest(), opts())
			if r.engine.Stats().ModuleCached {
				t.Fatal("New used a damaged module file")
			}
			if out := mustRun(t, r, `lookup(key="book") * inputs["n"]`, map[string]any{"n": 3}); string(out.Value) != "63" {
				t.Fatalf("value %s", out.Value)
			}
			rewritten, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("the module file was not rewritten: %v", err)
			}
			if !bytes.Equal(rewritten, good) {
				t.Fatal("the rewritten module file differs from the first one written")
			}
		})
	}
	if err := engine.CheckModuleFile(path); err != nil {
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
	newRunner(t, testManifest(), &Options{CacheDir: dir, PoolSize: -1})
	ctx := engine.WithStart(context.Background(), engine.StartFresh)
	r, err := New(ctx, testManifest(), &Options{CacheDir: dir, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if !r.engine.Stats().ModuleCached {
		t.Fatal("the module was not taken from the cache folder")
	}
	if out := mustRun(t, r, `lookup(key="book") * 2`, nil); string(out.Value) != "42" {
		t.Fatalf("value %s", out.Value)
	}
}
