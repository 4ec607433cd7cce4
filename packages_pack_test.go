package spine

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

// White-box tests of the packages' archive (packages.go): what it holds,
// its bounds, the preloads' check, and the world's digest that keys the
// image. The black-box tests of packages are in packages_test.go.

// userPackages is a small tree of pure-Python packages, as unpacked wheels
// leave them.
func userPackages(version string) fstest.MapFS {
	return fstest.MapFS{
		"greet/__init__.py":                       {Data: []byte("from .words import hello\nVERSION = " + version + "\n")},
		"greet/words.py":                          {Data: []byte("def hello(name):\n    return 'hello ' + name\n")},
		"greet/data/table.txt":                    {Data: []byte("a,b\n")},
		"greet/__pycache__/words.cpython-311.pyc": {Data: []byte("not bytecode")},
		"lonely.py":                               {Data: []byte("X = 7\n")},
		"greet-1.0.dist-info/METADATA":            {Data: []byte("Name: greet\n")},
	}
}

func TestPackagesAreInTheImageKey(t *testing.T) {
	if testing.Short() {
		t.Skip("makes two images")
	}
	// One cache folder: the second Runner must not take the first's image.
	dir := t.TempDir()
	for _, version := range []string{"1", "2"} {
		r := newRunner(t, nil, &Options{Packages: userPackages(version), Preload: []string{"greet"}, PoolSize: 1, CacheDir: dir})
		out, err := r.Run(context.Background(), Request{Source: "import greet\nresult = greet.VERSION"})
		if err != nil {
			t.Fatal(err)
		}
		if string(out.Value) != version {
			t.Fatalf("packages of version %s: the run saw %s", version, out.Value)
		}
	}
	a := newWorld(Artifact{}, []byte("one"), nil)
	b := newWorld(Artifact{}, []byte("two"), nil)
	c := newWorld(Artifact{}, []byte("one"), []string{"greet"})
	if bytes.Equal(a.digest, b.digest) || bytes.Equal(a.digest, c.digest) {
		t.Fatal("the world's digest does not follow the packages and the preloads")
	}
}

func TestPackagesArchive(t *testing.T) {
	a, err := packPackages(userPackages("1"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := packPackages(userPackages("1"))
	if !bytes.Equal(a, b) {
		t.Fatal("the same tree packed twice gave different bytes")
	}
	zr, err := zip.NewReader(bytes.NewReader(a), int64(len(a)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		if f.Method != zip.Store {
			t.Fatalf("%s is compressed", f.Name)
		}
		names = append(names, f.Name)
	}
	want := "greet/__init__.py greet/data/table.txt greet/words.py greet-1.0.dist-info/METADATA lonely.py"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("archive holds %s, want %s", got, want)
	}
}

func TestPackagesBounds(t *testing.T) {
	if _, err := readBounded(fstest.MapFS{"big.py": {Data: make([]byte, 101)}}, "big.py", 100); err == nil {
		t.Fatal("a file over the bound was read")
	}
	if _, err := readBounded(fstest.MapFS{"ok.py": {Data: make([]byte, 100)}}, "ok.py", 100); err != nil {
		t.Fatal(err)
	}
	long := fstest.MapFS{strings.Repeat("d/", maxPackagePath/2) + "m.py": {Data: []byte("x")}}
	if _, err := packPackages(long); !errors.Is(err, ErrPackages) {
		t.Fatalf("a path over %d bytes: err %v", maxPackagePath, err)
	}
	for _, bad := range []string{"", "os; import subprocess", "a..b", "1x", "a.", "x\nimport os", strings.Repeat("a", 300)} {
		if _, err := checkPreload([]string{bad}); !errors.Is(err, ErrPackages) {
			t.Fatalf("preload %q: err %v", bad, err)
		}
	}
	if _, err := checkPreload(make([]string, maxPreload+1)); !errors.Is(err, ErrPackages) {
		t.Fatal("too many preloads accepted")
	}
	got, err := checkPreload([]string{"json", "email.mime.text", "json"})
	if err != nil || strings.Join(got, ",") != "json,email.mime.text" {
		t.Fatalf("checkPreload = %v, %v", got, err)
	}
}
