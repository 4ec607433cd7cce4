package engine

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
)

// tinyModule exports add(a, b) and mul(a, b): small enough to compile in
// a millisecond, so its cache entry can be damaged at every byte.
var tinyModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
	0x01, 0x07, 0x01, 0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7f, // type: (i32, i32) -> i32
	0x03, 0x03, 0x02, 0x00, 0x00, // two functions of that type
	0x07, 0x0d, 0x02, 0x03, 'a', 'd', 'd', 0x00, 0x00, 0x03, 'm', 'u', 'l', 0x00, 0x01, // exports
	0x0a, 0x11, 0x02, // code: local.get 0, local.get 1, i32.add / i32.mul
	0x07, 0x00, 0x20, 0x00, 0x20, 0x01, 0x6a, 0x0b,
	0x07, 0x00, 0x20, 0x00, 0x20, 0x01, 0x6c, 0x0b,
}

// compileTiny compiles tinyModule through the disk cache in dir as New
// does (openCodeCache, CompileModule, sealCodeCache) and calls its functions.
func compileTiny(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	cache, cacheDir, err := openCodeCache(false, dir, tinyModule)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close(ctx)
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
	defer rt.Close(ctx)
	compiled, err := rt.CompileModule(ctx, tinyModule)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	sealCodeCache(cacheDir, tinyModule)
	mod, err := rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := mod.ExportedFunction("add").Call(ctx, 6, 7)
	if err != nil || sum[0] != 13 {
		t.Fatalf("add(6, 7) = %v, %v", sum, err)
	}
	product, err := mod.ExportedFunction("mul").Call(ctx, 6, 7)
	if err != nil || product[0] != 42 {
		t.Fatalf("mul(6, 7) = %v, %v", product, err)
	}
}

// tinyEntry returns the path of tinyModule's one cache entry under dir.
func tinyEntry(t *testing.T, dir string) string {
	t.Helper()
	var entries []string
	codeEntries(codeFolder(dir, tinyModule), func(path string, _ os.FileInfo) {
		if !strings.HasSuffix(path, sumSuffix) && !strings.HasSuffix(path, ".tmp") {
			entries = append(entries, path)
		}
	})
	if len(entries) != 1 {
		t.Fatalf("cache entries: %v", entries)
	}
	if err := checkCodeEntry(entries[0]); err != nil {
		t.Fatalf("%s: %v", entries[0], err)
	}
	return entries[0]
}

// TestCodeCacheDamaged: whatever happened to a cache entry or its record —
// any byte changed, cut short at any length, lengthened, the record lost —
// the next compile works and leaves a sealed entry. Without openCodeCache's
// check, wazero v1.12.0 fails to compile after most of these changes and
// crashes the process after a change to a function offset (bytes 14-29 here).
func TestCodeCacheDamaged(t *testing.T) {
	dir := t.TempDir()
	compileTiny(t, dir)
	entry := tinyEntry(t, dir)
	good, err := os.ReadFile(entry)
	if err != nil {
		t.Fatal(err)
	}
	record, err := os.ReadFile(entry + sumSuffix)
	if err != nil {
		t.Fatal(err)
	}

	type damage struct {
		name          string
		entry, record []byte // nil: the file is missing
	}
	var cases []damage
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x10
		cases = append(cases, damage{fmt.Sprintf("entry byte %d changed", i), b, record})
		cases = append(cases, damage{fmt.Sprintf("entry cut to %d bytes", i), good[:i], record})
	}
	for i := range record {
		b := bytes.Clone(record)
		b[i] ^= 0x01
		cases = append(cases, damage{fmt.Sprintf("record byte %d changed", i), good, b})
	}
	cases = append(cases,
		damage{"entry a byte longer", append(bytes.Clone(good), 0), record},
		damage{"no record", good, nil},
		damage{"empty record", good, []byte{}},
	)
	for _, c := range cases {
		os.Remove(entry + sumSuffix)
		if err := os.WriteFile(entry, c.entry, 0o600); err != nil {
			t.Fatal(err)
		}
		if c.record != nil {
			if err := os.WriteFile(entry+sumSuffix, c.record, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		t.Run(c.name, func(t *testing.T) {
			compileTiny(t, dir)
			tinyEntry(t, dir)
		})
	}
}

// TestCodeCacheHit: an intact entry is used, not compiled again.
func TestCodeCacheHit(t *testing.T) {
	dir := t.TempDir()
	compileTiny(t, dir)
	entry := tinyEntry(t, dir)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(entry, old, old)
	before, _ := os.Stat(entry)
	compileTiny(t, dir)
	after, err := os.Stat(tinyEntry(t, dir))
	if err != nil || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the entry was written again (%v)", err)
	}
}

// TestCodeCacheLeftovers: records without an entry and temporary files of
// writers that died are removed, recent temporary files kept.
func TestCodeCacheLeftovers(t *testing.T) {
	dir := t.TempDir()
	compileTiny(t, dir)
	sub := filepath.Dir(tinyEntry(t, dir))
	orphan := filepath.Join(sub, "00ff"+sumSuffix)
	dead := filepath.Join(sub, "00ff.123.tmp")
	live := filepath.Join(sub, "00ff.456.tmp")
	for _, p := range []string{orphan, dead, live} {
		os.WriteFile(p, []byte("x"), 0o600)
	}
	old := time.Now().Add(-2 * tempMaxAge)
	os.Chtimes(dead, old, old)
	checkCodeCache(codeFolder(dir, tinyModule))
	for p, want := range map[string]bool{orphan: false, dead: false, live: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: kept %v, want %v", filepath.Base(p), err == nil, want)
		}
	}
	tinyEntry(t, dir)
}
