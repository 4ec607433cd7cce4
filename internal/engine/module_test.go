package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spine-run/spine/internal/wasm"
)

// testModuleFile is a module file holding 100 bytes (decodeModuleFile does
// not read them as wasm).
func testModuleFile(t testing.TB) (path string, m guestModule, file []byte) {
	m = guestModule{code: bytes.Repeat([]byte("spine"), 20), instrumented: true}
	path = filepath.Join(t.TempDir(), "modules", "x.mod")
	if err := writeModule(path, m); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, m, file
}

// TestModuleFile: a module file read back is the module written, and any
// change to it — each byte in turn, every truncation, one byte more — makes
// loading it fail and removes it.
func TestModuleFile(t *testing.T) {
	path, m, good := testModuleFile(t)
	got, err := loadModule(path)
	if err != nil || !bytes.Equal(got.code, m.code) || !got.instrumented || !got.cached {
		t.Fatalf("read back: %v (%q, instrumented %v)", err, got.code, got.instrumented)
	}
	got.close()
	check := func(what string, file []byte) {
		t.Helper()
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		if m, err := loadModule(path); err == nil {
			m.close()
			t.Fatalf("%s: loaded", what)
		}
		if _, err := os.Stat(path); err == nil {
			t.Fatalf("%s: not removed", what)
		}
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x04
		check(fmt.Sprintf("byte %d", i), b)
	}
	for n := 0; n < len(good); n++ {
		check(fmt.Sprintf("cut to %d bytes", n), good[:n])
	}
	check("longer", append(bytes.Clone(good), 0))
}

// FuzzModuleFile: any bytes in a module file are the module they hold or
// refused, never a panic; what is accepted is exactly what writeModule
// writes for that module.
func FuzzModuleFile(f *testing.F) {
	_, _, good := testModuleFile(f)
	f.Add(good)
	f.Add(good[:moduleHeaderSize])
	f.Add(append(bytes.Clone(good), 0))
	f.Fuzz(func(t *testing.T, file []byte) {
		code, instrumented, err := decodeModuleFile(file)
		if err != nil {
			return
		}
		again := append(moduleHeader(guestModule{code: code, instrumented: instrumented}), code...)
		if !bytes.Equal(again, file) {
			t.Fatalf("accepted a file writeModule would not write")
		}
	})
}

// TestPruneModules: old module files go, the one in use stays.
func TestPruneModules(t *testing.T) {
	path, m, _ := testModuleFile(t)
	dir := filepath.Dir(path)
	for _, name := range []string{"a.mod", "b.mod", "c.mod", "d.mod", "e.mod"} {
		if err := writeModule(filepath.Join(dir, name), m); err != nil {
			t.Fatal(err)
		}
	}
	pruneFiles(dir, path, ".mod", maxCachedModules)
	left, _ := filepath.Glob(filepath.Join(dir, "*.mod"))
	if len(left) != maxCachedModules {
		t.Fatalf("left %d module files, want %d", len(left), maxCachedModules)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal("the module in use was removed")
	}
}

// TestNewCompileErrorWhileImageLoads: when the compile fails while the image
// is being loaded beside it, New reports the compile's error and releases the
// loaded image (its memfd and mapping), leaking no descriptor.
func TestNewCompileErrorWhileImageLoads(t *testing.T) {
	dir := t.TempDir()
	module, _, err := makeModule(tinyModule)
	if err != nil {
		t.Fatal(err)
	}
	const key = "tiny"
	if err := writeImage(imagePath(dir, key+"-"+moduleID(module.code)), testImage()); err != nil {
		t.Fatal(err)
	}
	fds := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(entries)
	}
	before := fds()
	for range 3 {
		_, err := New(context.Background(), Config{Wasm: tinyModule, ImageKey: key, CacheDir: dir, MemoryLimit: 64 << 20})
		if !errors.Is(err, ErrArtifact) || !strings.Contains(err.Error(), "does not export") {
			t.Fatalf("New: %v", err)
		}
	}
	if after := fds(); after != before {
		t.Fatalf("%d descriptors open before New, %d after", before, after)
	}
	if paths, _ := filepath.Glob(filepath.Join(dir, "modules", "*.mod")); len(paths) != 1 {
		t.Fatalf("module files: %v", paths)
	}
}

// A module without tick checks must never be found under the key of one
// with them (spine bench --variant-no-ticks shares the process).
func TestModuleKeyOmitTicks(t *testing.T) {
	with := moduleKey("a")
	wasm.OmitTicksForMeasurement.Store(true)
	without := moduleKey("a")
	wasm.OmitTicksForMeasurement.Store(false)
	if with == without {
		t.Fatalf("the same key %q with and without tick checks", with)
	}
	if moduleKey("a") != with {
		t.Fatal("the key did not come back once the switch was off")
	}
}
