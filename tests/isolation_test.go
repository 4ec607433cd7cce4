package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// isolationProbe reports what a run can see of the Guest's state outside
// Python objects: the descriptor table (modes of 0–11, the number the next
// open gets), standard input, the preopened folders, the working directory
// and the scratch tree, the modules loaded and the program's globals. A run on a Guest that earlier runs abused must see
// exactly what a run on a new Guest sees.
const isolationProbe = `import os, sys
modes = []
for fd in range(12):
    try:
        modes.append(os.fstat(fd).st_mode)
    except OSError as e:
        modes.append(-e.errno)
fd = os.open("/usr/local/lib", os.O_RDONLY)
os.close(fd)
print("out")
print("err", file=sys.stderr)
result = {"modes": modes, "next_fd": fd, "stdin": sys.stdin.read(), "dir": os.listdir("/usr/local/lib"),
          "scratch": [os.getcwd(), os.listdir("/"), os.listdir("."), os.listdir("/tmp")],
          "modules": sorted(sys.modules), "names": sorted(globals())}
`

// TestIsolationHostileSuite runs hostile programs in sequence on a Runner
// with one pooled Guest: each tries to leave something of itself in the
// Guest's state outside linear memory. After each, an ordinary run must
// work, and at the end the probe must see a Guest like a new one.
func TestIsolationHostileSuite(t *testing.T) {
	fresh := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1})
	want := spinetest.MustRun(t, fresh, spine.Request{Source: isolationProbe})

	r := spinetest.PoolRunner(t)
	const maxFDs = 64 // the default MaxDescriptors
	ordinary := func(after string) {
		t.Helper()
		out, err := r.Run(context.Background(), spine.Request{Source: `print("ok"); result = lookup(key="book")`})
		if err != nil || string(out.Value) != "21" || out.Stdout != "ok\n" {
			t.Fatalf("after %s: %v %+v", after, err, out)
		}
	}
	hostile := []struct {
		name, src string
		want      string // the run's value
	}{
		{"close stdin", "import os; os.close(0)", "null"},
		{"close stdout", "import os; os.close(1)\ntry:\n    print('x')\n    result = 'printed'\nexcept OSError as e:\n    result = e.errno", "8"},
		{"close stderr", "import os; os.close(2)", "null"},
		{"close the preopen", "import os; os.close(3)", "null"},
		{"close all four", "import os\nfor fd in range(4):\n    os.close(fd)", "null"},
		{"read stdin then let it go", "open(0).read()", `""`},
		{"close sys.stdout", "import sys; sys.stdout.close(); sys.stderr.close()", "null"},
		{"stat the preopen", "import os; result = os.fstat(3).st_mode", "16384"},
		{"directory flood", fmt.Sprintf(`import os, errno
fds = []
try:
    while True:
        fds.append(os.open("/usr/local/lib", os.O_RDONLY))
except OSError as e:
    result = [0 < len(fds) <= %d, e.errno == errno.EMFILE]`, maxFDs), "[true,true]"},
		{"file flood", fmt.Sprintf(`files = []
try:
    while True:
        files.append(open("/usr/local/lib/python311.zip", "rb"))
except OSError as e:
    result = [0 < len(files) <= %d, e.errno]`, maxFDs), "[true,33]"},
		{"flood, close, flood again", `import os
for _ in range(3):
    fds = []
    try:
        while True:
            fds.append(os.open("/usr/local/lib", os.O_RDONLY))
    except OSError:
        pass
    for fd in fds:
        os.close(fd)
result = os.open("/usr/local/lib", os.O_RDONLY)`, "5"},
		{"directory left open", `import os; result = os.open("/usr/local/lib", os.O_RDONLY)`, "5"},
		{"scratch files left, elsewhere", `import os
open("/tmp/t", "w").write("tmp")
os.makedirs("a/b")
os.chdir("a/b")
open("here", "w").write("x" * 100000)
result = os.getcwd()`, `"/work/a/b"`},
		{"scratch file left open", `f = open("kept", "w"); f.write("x"); f.flush(); result = f.fileno()`, "5"},
		{"scandir left open", `import os; it = os.scandir("/usr/local/lib"); result = next(it).name`, `"python311.zip"`},
		{"file left open", `f = open("/usr/local/lib/python311.zip", "rb"); result = f.fileno()`, "5"},
		{"hole in the table", `import os
a = os.open("/usr/local/lib", os.O_RDONLY)
b = os.open("/usr/local/lib", os.O_RDONLY)
os.close(a)
result = [a, b]`, "[5,6]"},
		{"a directory where stderr was", `import os
os.close(2)
result = os.open("/usr/local/lib", os.O_RDONLY)`, "2"},
		{"exit", "import os; os._exit(0)", ""},
	}
	for _, h := range hostile {
		out, err := r.Run(context.Background(), spine.Request{Source: h.src})
		if h.want == "" {
			if _, ok := err.(*spine.PythonError); !ok {
				t.Fatalf("%s: err = %v, want a Python error", h.name, err)
			}
		} else if err != nil || string(out.Value) != h.want {
			t.Fatalf("%s: %v, value %s, want %s", h.name, err, valueOf(out), h.want)
		}
		ordinary(h.name)
	}

	// A channel through descriptor numbers: the sender leaves k descriptors
	// open; the receiver reads the number its own open gets.
	for k := 0; k < 4; k++ {
		spinetest.MustRun(t, r, spine.Request{Source: fmt.Sprintf(`import os
for _ in range(%d):
    os.open("/usr/local/lib", os.O_RDONLY)`, k)})
		out := spinetest.MustRun(t, r, spine.Request{Source: `import os; result = os.open("/usr/local/lib", os.O_RDONLY)`})
		if string(out.Value) != "5" {
			t.Fatalf("after a sender left %d descriptors open, the receiver's open got %s", k, out.Value)
		}
	}

	got := spinetest.MustRun(t, r, spine.Request{Source: isolationProbe})
	if string(got.Value) != string(want.Value) || got.Stdout != want.Stdout || got.Stderr != want.Stderr {
		t.Fatalf("the Guest does not look new:\n got %s %q %q\nwant %s %q %q",
			got.Value, got.Stdout, got.Stderr, want.Value, want.Stdout, want.Stderr)
	}
	var probe struct {
		Modes  []int `json:"modes"`
		NextFD int   `json:"next_fd"`
	}
	if err := json.Unmarshal(want.Value, &probe); err != nil || probe.NextFD != 5 || probe.Modes[5] != -8 {
		t.Fatalf("the probe of a new Guest: %s (%v)", want.Value, err)
	}
}

// TestIsolationDescriptorLimit: MaxDescriptors is the cap, exactly, on what
// one run holds, counted over files and directories together.
func TestIsolationDescriptorLimit(t *testing.T) {
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: 1, MaxDescriptors: 5})
	out := spinetest.MustRun(t, r, spine.Request{Source: `import os, errno
held = [open("/usr/local/lib/python311.zip", "rb"), open("/usr/local/lib/python311.zip", "rb")]
fds = []
try:
    while True:
        fds.append(os.open("/usr/local/lib", os.O_RDONLY))
except OSError as e:
    err = [e.errno == errno.EMFILE, e.strerror]
for fd in fds:
    os.close(fd)
again = os.open("/usr/local/lib", os.O_RDONLY)
result = [len(held) + len(fds), err, again > 2]`})
	if !strings.HasPrefix(string(out.Value), `[5,[true,"No file descriptors available"]`) && !strings.HasPrefix(string(out.Value), `[5,[true,"Too many open files"]`) {
		t.Fatalf("value %s", out.Value)
	}
}

// TestIsolationReuse: the checks discard a Guest only when its state
// differs; runs that import from the archive, open and close files or stat
// the preopened folder leave it reusable.
func TestIsolationReuse(t *testing.T) {
	r := spinetest.PoolRunner(t)
	spinetest.MustRun(t, r, spine.Request{Source: "1"})
	// A run that finds its Guest still being reset makes a new one rather
	// than wait; so each run here waits for the pool to hold its Guest.
	waitReady := func() {
		for r.Stats().PoolReady < 1 {
			runtime.Gosched()
		}
	}
	waitReady()
	made := r.Stats().InstancesMade
	for i := 0; i < 5; i++ {
		waitReady()
		spinetest.MustRun(t, r, spine.Request{Source: `import os, fractions, decimal, statistics
with open("/usr/local/lib/python311.zip", "rb") as f:
    f.read(4)
fd = os.open("/usr/local/lib", os.O_RDONLY)
os.close(fd)
result = [os.fstat(3).st_mode, sorted(os.listdir("/usr/local/lib"))]`})
	}
	if now := r.Stats().InstancesMade; now != made {
		t.Fatalf("%d Guests made for 5 runs that left the state as they found it", now-made)
	}
}
