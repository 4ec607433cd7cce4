package spine

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// linkTree makes a package folder on the disk with real files, links and
// named pipes, as spine run --packages reads it.
func linkTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"greet/__init__.py": "from greet.words import hello\n",
		"greet/words.py":    "def hello(n): return 'hello ' + n\n",
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestPackagesLinksInsideAreFollowed(t *testing.T) {
	dir := linkTree(t)
	symlink(t, "words.py", filepath.Join(dir, "greet/alias.py"))
	symlink(t, "../greet/./words.py", filepath.Join(dir, "greet/again.py"))
	symlink(t, "greet/alias.py", filepath.Join(dir, "chain.py")) // a link to a link
	zipped, err := packPackages(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	words, _ := os.ReadFile(filepath.Join(dir, "greet/words.py"))
	for _, name := range []string{"greet/alias.py", "greet/again.py", "chain.py"} {
		if got := zipFile(t, zipped, name); got != string(words) {
			t.Fatalf("%s holds %q, want greet/words.py's %q", name, got, words)
		}
	}
}

func TestPackagesRefuseLinksOutAndSpecialFiles(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("TOKEN=x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(outside, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		make func(t *testing.T, dir string)
		want string // in the error, beside the entry's name
	}{
		{"greet/env.py", func(t *testing.T, dir string) { symlink(t, "/proc/self/environ", filepath.Join(dir, "greet/env.py")) }, "/proc/self/environ, outside the package folder"},
		{"greet/null.py", func(t *testing.T, dir string) { symlink(t, "/dev/null", filepath.Join(dir, "greet/null.py")) }, "outside the package folder"},
		{"greet/up.py", func(t *testing.T, dir string) {
			rel, _ := filepath.Rel(filepath.Join(dir, "greet"), filepath.Join(outside, "secret"))
			symlink(t, rel, filepath.Join(dir, "greet/up.py"))
		}, "leads out of the package folder"},
		{"via.py", func(t *testing.T, dir string) {
			// a link inside the tree that passes through a link to a folder outside
			symlink(t, outside, filepath.Join(dir, "zz"))
			symlink(t, "zz/secret", filepath.Join(dir, "via.py"))
		}, "outside the package folder"},
		{"greet/folder.py", func(t *testing.T, dir string) { symlink(t, ".", filepath.Join(dir, "greet/folder.py")) }, "a folder"},
		{"greet/pipe.py", func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "greet/pipe.py"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "a named pipe"},
		{"greet/topipe.py", func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "zfifo"), 0o644); err != nil {
				t.Fatal(err)
			}
			symlink(t, "../zfifo", filepath.Join(dir, "greet/topipe.py"))
		}, "a named pipe"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := linkTree(t)
			c.make(t, dir)
			_, err := packPackages(os.DirFS(dir))
			if !errors.Is(err, ErrPackages) {
				t.Fatalf("err %v, want ErrPackages", err)
			}
			if !strings.Contains(err.Error(), c.name+": ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %q, want one naming %s and saying %q", err, c.name, c.want)
			}
		})
	}
}

// zipFile is the text of the file name in the zip archive a.
func zipFile(t *testing.T, a []byte, name string) string {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(a), int64(len(a)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := zr.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
