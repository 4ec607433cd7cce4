package engine

import (
	"os"
	"path/filepath"
	"testing"
)

// TestUsableCacheFolder: a folder that can be written is used, and a seed's
// files it lacks are copied in (not the ones it has, nor a writer's
// temporary files); one that cannot be made is not used, with the reason.
func TestUsableCacheFolder(t *testing.T) {
	seed := t.TempDir()
	for name, data := range map[string]string{"code/x/entry": "compiled", "images/a.img": "image", "images/b.img.123.tmp": "partial", "modules/m.mod": "seed's"} {
		path := filepath.Join(seed, name)
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(data), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "cache")
	os.MkdirAll(filepath.Join(dir, "modules"), 0o755)
	os.WriteFile(filepath.Join(dir, "modules/m.mod"), []byte("its own"), 0o600)
	got, err := usableCacheFolder(dir, seed)
	if got != dir || err != nil {
		t.Fatalf("usableCacheFolder = %q, %v", got, err)
	}
	for name, want := range map[string]string{"code/x/entry": "compiled", "images/a.img": "image", "modules/m.mod": "its own"} {
		if data, _ := os.ReadFile(filepath.Join(dir, name)); string(data) != want {
			t.Errorf("%s: %q, want %q", name, data, want)
		}
	}
	if target, err := os.Readlink(filepath.Join(dir, "images/a.img")); err != nil || target != filepath.Join(seed, "images/a.img") {
		t.Errorf("images/a.img is not a link to the seed's: %q, %v", target, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "images/b.img.123.tmp")); err == nil {
		t.Error("a temporary file was copied")
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, ".probe-*")); len(entries) > 0 {
		t.Errorf("probes left: %v", entries)
	}
	// A seed that does not exist is no error.
	if got, err := usableCacheFolder(dir, filepath.Join(seed, "none")); got != dir || err != nil {
		t.Errorf("a missing seed: %q, %v", got, err)
	}
	// Under a regular file, no folder can be made.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	if got, err := usableCacheFolder(filepath.Join(file, "cache"), ""); got != "" || err == nil {
		t.Errorf("a folder under a file: %q, %v", got, err)
	}
}
