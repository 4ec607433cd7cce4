package spine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

func TestPackagesImportAndPreload(t *testing.T) {
	if testing.Short() {
		t.Skip("makes its own image")
	}
	r := spinetest.NewRunner(t, nil, &spine.Options{Packages: spine.UserPackages("1"), Preload: []string{"greet"}, PoolSize: 1})
	out := spinetest.MustRun(t, r, spine.Request{Source: `import sys
preloaded = "greet" in sys.modules and "greet.words" in sys.modules
lonely_before = "lonely" in sys.modules
import greet, lonely, importlib.resources
result = [preloaded, lonely_before, greet.hello("ada"), greet.VERSION, lonely.X,
          importlib.resources.files("greet").joinpath("data/table.txt").read_text()]
`})
	if got, want := string(out.Value), `[true,false,"hello ada",1,7,"a,b\n"]`; got != want {
		t.Fatalf("value %s, want %s", got, want)
	}
	// A run's changes to a package's module do not reach the next run.
	spinetest.MustRun(t, r, spine.Request{Source: "import greet\ngreet.VERSION = 99"})
	out = spinetest.MustRun(t, r, spine.Request{Source: "import greet\nresult = greet.VERSION"})
	if string(out.Value) != "1" {
		t.Fatalf("the next run saw VERSION %s", out.Value)
	}
}

func TestPackagesRefuseCompiledModules(t *testing.T) {
	tree := spine.UserPackages("1")
	tree["greet/_speedups.cpython-311-x86_64-linux-gnu.so"] = &fstest.MapFile{Data: []byte("\x7fELF")}
	tree["other/native.pyd"] = &fstest.MapFile{Data: []byte("MZ")}
	_, err := spine.New(context.Background(), nil, &spine.Options{Packages: tree})
	if !errors.Is(err, spine.ErrPackages) {
		t.Fatalf("err %v, want ErrPackages", err)
	}
	for _, name := range []string{"greet/_speedups.cpython-311-x86_64-linux-gnu.so", "other/native.pyd"} {
		if !strings.Contains(err.Error(), name) {
			t.Fatalf("the error does not name %s: %v", name, err)
		}
	}
}

func TestPreloadFailureFailsNew(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Guest")
	}
	// The failing import is the second preload: the error names it, and
	// the exception, not the Guest's response.
	_, err := spine.New(context.Background(), nil, &spine.Options{Preload: []string{"json", "no_such_module_here", "csv"}, PoolSize: 1, NoDiskCache: true})
	want := `spine: packages: preload no_such_module_here: ModuleNotFoundError: No module named 'no_such_module_here'`
	if !errors.Is(err, spine.ErrPackages) || err.Error() != want {
		t.Fatalf("err %v, want ErrPackages %q", err, want)
	}
	// A preloaded package of Options.Packages that raises at its import.
	tree := spine.UserPackages("1")
	tree["broken/__init__.py"] = &fstest.MapFile{Data: []byte("import greet\nraise ValueError('no config')\n")}
	_, err = spine.New(context.Background(), nil, &spine.Options{Packages: tree, Preload: []string{"greet", "broken"}, PoolSize: 1, NoDiskCache: true})
	want = `spine: packages: preload broken: ValueError: no config`
	if !errors.Is(err, spine.ErrPackages) || err.Error() != want {
		t.Fatalf("err %v, want ErrPackages %q", err, want)
	}
}
