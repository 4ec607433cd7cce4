package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// only checks that dir holds just the names given: no temporary file is left.
func only(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(names) {
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		t.Fatalf("%s holds %q, want %q", dir, got, names)
	}
	for i, e := range entries {
		if e.Name() != names[i] {
			t.Fatalf("%s holds %s, want %s", dir, e.Name(), names[i])
		}
	}
}

func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, text := range []string{"first", "second, longer", "3"} {
		if err := Write(path, []byte(text), Options{Sync: text == "3"}); err != nil {
			t.Fatal(err)
		}
		if got := read(t, path); got != text {
			t.Fatalf("read %q, want %q", got, text)
		}
	}
	only(t, dir, "f")
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("mode %v, want 0600", perm)
	}
}

func TestFailureLeavesFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := Write(path, []byte("kept"), Options{}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFunc(path, func(f *os.File) error {
		f.Write([]byte("half"))
		return boom
	}, Options{})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want the fill's", err)
	}
	if got := read(t, path); got != "kept" {
		t.Fatalf("after a failed write the file holds %q", got)
	}
	only(t, dir, "f")

	// A folder that does not exist: an error, nothing made.
	if err := Write(filepath.Join(dir, "no", "f"), []byte("x"), Options{}); err == nil {
		t.Fatal("wrote into a missing folder")
	}
}

func TestKeep(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "image")
	opts := Options{Keep: true, Pattern: "tmp-*"}
	if err := Write(path, []byte("first"), opts); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("second"), opts); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("err %v, want fs.ErrExist", err)
	}
	if got := read(t, path); got != "first" {
		t.Fatalf("Keep replaced the file: %q", got)
	}
	only(t, dir, "image")
}
