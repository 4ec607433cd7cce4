package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// filesOf is out.Files as a map of name to contents.
func filesOf(out *spine.Output) map[string]string {
	m := map[string]string{}
	for _, f := range out.Files {
		m[f.Name] = string(f.Data)
	}
	return m
}

// TestScratchFileSystem: what programs do with files, in the working
// directory and /tmp.
func TestScratchFileSystem(t *testing.T) {
	r := shared(t)
	out := spinetest.MustRun(t, r, spine.Request{Source: `import os, csv, tempfile, shutil, pathlib
start = os.getcwd()
with open("sales.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["item", "qty"])
    w.writerows([["book", 3], ["pen", 10]])
with open("sales.csv", "a", newline="") as f:
    csv.writer(f).writerow(["ink", 1])
rows = list(csv.DictReader(open("sales.csv")))
total = sum(int(r["qty"]) for r in rows)

with tempfile.TemporaryFile() as t:          # unlinked while open
    t.write(b"0123456789")
    t.seek(3)
    part = t.read(4)
    t.truncate(2)
    t.seek(0)
    after_truncate = t.read()
with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as t:
    t.write("named")
    tmp_name = t.name
tmpdir = tempfile.mkdtemp()
os.rename(tmp_name, "named.txt")
os.makedirs("out/deep")
shutil.copy("sales.csv", "out/deep/copy.csv")
shutil.copytree("out", "out2")
shutil.rmtree("out2")
open("gone.txt", "w").write("x")
os.remove("gone.txt")
os.mkdir("empty"); os.rmdir("empty")
p = pathlib.Path("notes") / "a.md"
p.parent.mkdir()
p.write_text("# hi")
with open("seek.bin", "wb+") as f:
    f.write(b"abcdef")
    f.seek(-2, os.SEEK_END)
    tail = f.read()
    f.seek(10)
    f.write(b"!")
os.chdir("notes")
rel = open("a.md").read()
here = os.getcwd()
os.chdir("..")
result = {
    "start": start, "total": total, "part": part.decode(), "after_truncate": after_truncate.decode(),
    "tmp": tmp_name.startswith("/tmp/"), "tmpdir": os.path.isdir(tmpdir) and tmpdir.startswith("/tmp/"),
    "listing": sorted(os.listdir(".")), "walk": sorted(os.path.join(d, f) for d, _, fs in os.walk(".") for f in fs),
    "size": os.stat("sales.csv").st_size, "isdir": os.path.isdir("out"), "tail": tail.decode(),
    "seek_size": os.path.getsize("seek.bin"), "rel": rel, "here": here, "cwd": os.getcwd(),
    "glob": sorted(str(x) for x in pathlib.Path(".").glob("*.txt")), "exists": os.path.exists("gone.txt"),
}`})
	var got map[string]any
	if err := json.Unmarshal(out.Value, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"start": "/work", "total": 14.0, "part": "3456", "after_truncate": "01", "tmp": true, "tmpdir": true,
		"listing": []any{"named.txt", "notes", "out", "sales.csv", "seek.bin"},
		"walk":    []any{"./named.txt", "./notes/a.md", "./out/deep/copy.csv", "./sales.csv", "./seek.bin"},
		"size":    33.0, "isdir": true, "tail": "ef", "seek_size": 11.0, "rel": "# hi", "here": "/work/notes",
		"cwd": "/work", "glob": []any{"named.txt"}, "exists": false,
	}
	for k, v := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	files := filesOf(out)
	sales := "item,qty\r\nbook,3\r\npen,10\r\nink,1\r\n"
	wantFiles := map[string]string{"named.txt": "named", "notes/a.md": "# hi", "out/deep/copy.csv": sales,
		"sales.csv": sales, "seek.bin": "abcdef\x00\x00\x00\x00!"}
	if fmt.Sprint(files) != fmt.Sprint(wantFiles) || out.FilesLeftOut != 0 {
		t.Fatalf("Output.Files = %q (%d left out), want %q", files, out.FilesLeftOut, wantFiles)
	}
}

// TestScratchNoLinks: links of either kind are refused, so nothing in the
// tree can lead to a Host path.
func TestScratchNoLinks(t *testing.T) {
	r := shared(t)
	out := spinetest.MustRun(t, r, spine.Request{Source: `import os, errno
open("a", "w").write("a")
res = []
for f in (lambda: os.symlink("/etc/passwd", "p"), lambda: os.symlink("a", "b"), lambda: os.link("a", "c")):
    try:
        f()
        res.append("made")
    except OSError as e:
        res.append(errno.errorcode[e.errno])
res.append(os.path.islink("a"))
try:
    os.readlink("a")
except OSError as e:
    res.append(errno.errorcode[e.errno])
result = res`})
	if string(out.Value) != `["EPERM","EPERM","EPERM",false,"EINVAL"]` {
		t.Fatalf("links: %s", out.Value)
	}
}

// TestScratchLimit: past ScratchSize a write fails with ENOSPC, which the
// program can catch; its output and value are intact, and so is the file
// it wrote up to the limit. Removing a file gives its room back.
func TestScratchLimit(t *testing.T) {
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{ScratchSize: 1 << 20, MaxScratchEntries: 20})
	out, err := r.Run(context.Background(), spine.Request{Source: `import os, errno
print("before")
chunk = b"x" * 65536
written = 0
try:
    with open("big", "wb") as f:
        while True:
            f.write(chunk)
            f.flush()
            written += len(chunk)
except OSError as e:
    first = errno.errorcode[e.errno]
size = os.path.getsize("big")
try:
    open("/tmp/more", "wb").write(chunk)
    second = "written"
except OSError as e:
    second = errno.errorcode[e.errno]
os.remove("big")
open("again", "wb").write(chunk * 8)
made = 0
try:
    for i in range(100):
        os.mkdir(f"d{i}")
        made += 1
except OSError as e:
    third = errno.errorcode[e.errno]
print("after")
result = [first, second, third, size > 900000, written == size, made]`})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != `["ENOSPC","ENOSPC","ENOSPC",true,true,19]` || out.Stdout != "before\nafter\n" {
		t.Fatalf("value %s, stdout %q", out.Value, out.Stdout)
	}
	if f := filesOf(out); len(f["again"]) != 8*65536 || len(f) != 1 {
		t.Fatalf("Output.Files after ENOSPC: %d files", len(f))
	}

	// An uncaught ENOSPC is an OSError the caller sees, with the output before it.
	out, err = r.Run(context.Background(), spine.Request{Source: `print("partial")
open("big", "wb").write(b"x" * (2 << 20))`})
	if pe := spinetest.PythonError(t, err); pe.Type != "OSError" || !strings.Contains(pe.Message, "No space left on device") || out.Stdout != "partial\n" {
		t.Fatalf("got %v, stdout %q", err, out.Stdout)
	}

	// A file seeked far past the limit does not take the Host's memory.
	out, err = r.Run(context.Background(), spine.Request{Source: `import errno
f = open("sparse", "wb")
f.seek(1 << 40)
try:
    f.write(b"x"); f.flush()
except OSError as e:
    result = errno.errorcode[e.errno]`})
	if err != nil || string(out.Value) != `"ENOSPC"` {
		t.Fatalf("sparse: %v %s", err, valueOf(out))
	}
}

// TestScratchPerRun: a pooled Guest's next run finds /work and /tmp empty,
// and starts in /work whatever directory the last run left.
func TestScratchPerRun(t *testing.T) {
	r := spinetest.PoolRunner(t)
	waitReady := func() {
		for r.Stats().PoolReady < 1 {
			runtime.Gosched()
		}
	}
	waitReady()
	spinetest.MustRun(t, r, spine.Request{Source: `import os
open("/tmp/secret", "w").write("run 1")
os.makedirs("keep/me")
open("keep/me/file", "w").write("run 1")
os.chdir("/tmp")`})
	made := r.Stats().InstancesMade
	waitReady()
	out := spinetest.MustRun(t, r, spine.Request{Source: `import os
result = [os.getcwd(), os.listdir("/"), os.listdir("."), os.listdir("/tmp"), os.path.exists("/work/keep")]`})
	if string(out.Value) != `["/work",["tmp","work"],[],[],false]` {
		t.Fatalf("the next run sees %s", out.Value)
	}
	if r.Stats().InstancesMade != made {
		t.Fatal("the Guest was not reused: the test saw a new one")
	}

	// A run that leaves a scratch file open is not followed on its Guest.
	waitReady()
	spinetest.MustRun(t, r, spine.Request{Source: `import builtins; builtins.held = open("/tmp/held", "w")`})
	waitReady()
	out = spinetest.MustRun(t, r, spine.Request{Source: `import os; result = os.listdir("/tmp")`})
	if string(out.Value) != `[]` || r.Stats().InstancesMade == made {
		t.Fatalf("after a file left open: %s, %d instances made (had %d)", out.Value, r.Stats().InstancesMade, made)
	}
}

// TestScratchSession: a session's runs each have their own files, as every
// run does; a file object kept in a session's variable cannot reach a later
// run's files, nor another session's.
func TestScratchSession(t *testing.T) {
	r := shared(t)
	a, b := spinetest.NewSession(t, r), spinetest.NewSession(t, r)
	spinetest.Step(t, a, `import os
f = open("mine.txt", "w+")
f.write("session a, run 1")
f.flush()
d = os.open(".", os.O_RDONLY)`)
	spinetest.Step(t, b, `open("mine.txt", "w").write("session b")`)
	got := spinetest.Step(t, a, `import errno
res = [sorted(os.listdir("."))]
for op in (lambda: f.seek(0), lambda: f.read(), lambda: (f.write("x"), f.flush()), lambda: os.fstat(f.fileno()),
           lambda: os.open("mine.txt", os.O_RDONLY, dir_fd=d), lambda: os.stat("mine.txt", dir_fd=d)):
    try:
        res.append(op())
    except OSError as e:
        res.append(errno.errorcode[e.errno])
open("mine.txt", "w").write("session a, run 2")
res.append(open("mine.txt").read())
result = res`)
	if got != `[[],"EBADF","EBADF","EBADF","EBADF","EBADF","EBADF","session a, run 2"]` {
		t.Fatalf("a session's later run through an earlier run's file objects: %s", got)
	}
	out, err := b.Run(context.Background(), spine.Request{Source: `import os; result = os.listdir(".")`,
		Files: []spine.File{{Name: "in.txt", Data: []byte("given")}}})
	if err != nil || string(out.Value) != `["in.txt"]` {
		t.Fatalf("session b: %v %s", err, valueOf(out))
	}
	// Files held open cannot be carried by a snapshot.
	if _, err := a.Snapshot(context.Background()); !errors.Is(err, spine.ErrSessionState) {
		t.Fatalf("Snapshot of a session holding files open: %v", err)
	}
	spinetest.Step(t, a, `try:
    f.close()  # flushes the "x" above: EBADF, and closes
except OSError:
    pass
os.close(d)`)
	if _, err := a.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestRequestFiles: a request's files are in the working directory; only
// those the program wrote come back, and the caps on Output.Files hold.
func TestRequestFiles(t *testing.T) {
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{MaxFiles: 3, MaxFileBytes: 100})
	out, err := r.Run(context.Background(), spine.Request{Source: `import os
data = open("in/data.csv").read()
open("in/notes.txt", "a").write(" and more")
result = [data, sorted(os.listdir("in"))]`, Files: []spine.File{
		{Name: "in/data.csv", Data: []byte("a,b\n1,2\n")},
		{Name: "in/notes.txt", Data: []byte("notes")},
	}})
	if err != nil || string(out.Value) != `["a,b\n1,2\n",["data.csv","notes.txt"]]` {
		t.Fatalf("%v %s", err, valueOf(out))
	}
	if f := filesOf(out); fmt.Sprint(f) != "map[in/notes.txt:notes and more]" {
		t.Fatalf("Output.Files = %q", f)
	}

	// Caps: the first files by name that fit, the rest counted.
	out = spinetest.MustRun(t, r, spine.Request{Source: `for i in range(5):
    open(f"f{i}", "w").write("x" * 30)`})
	if len(out.Files) != 3 || out.FilesLeftOut != 2 || out.Files[0].Name != "f0" {
		t.Fatalf("%d files, %d left out", len(out.Files), out.FilesLeftOut)
	}
	out = spinetest.MustRun(t, r, spine.Request{Source: `open("a", "w").write("x" * 90); open("b", "w").write("x" * 20); open("c", "w").close()`})
	if fmt.Sprint(filesOf(out)) != fmt.Sprint(map[string]string{"a": strings.Repeat("x", 90), "c": ""}) || out.FilesLeftOut != 1 {
		t.Fatalf("files %v, %d left out", filesOf(out), out.FilesLeftOut)
	}

	// A Python error still returns the files, as it returns the output.
	out, err = r.Run(context.Background(), spine.Request{Source: `open("partial", "w").write("p"); 1/0`})
	if spinetest.PythonError(t, err) == nil || filesOf(out)["partial"] != "p" {
		t.Fatalf("files of a failed run: %v", filesOf(out))
	}
}

// TestRequestFilesRefused: hostile or oversized Request.Files are refused
// before the run with a clear error.
func TestRequestFilesRefused(t *testing.T) {
	r := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{MaxFiles: 4, MaxFileBytes: 1000, ScratchSize: 2048})
	for _, tc := range []struct {
		name  string
		files []spine.File
		want  error
		says  string
	}{
		{"absolute", []spine.File{{Name: "/etc/passwd"}}, spine.ErrBadRequest, "absolute"},
		{"escape", []spine.File{{Name: "../x"}}, spine.ErrBadRequest, "not clean"},
		{"escape inside", []spine.File{{Name: "a/../../x"}}, spine.ErrBadRequest, "not clean"},
		{"dot", []spine.File{{Name: "./x"}}, spine.ErrBadRequest, "not clean"},
		{"empty", []spine.File{{Name: ""}}, spine.ErrBadRequest, "no name"},
		{"empty part", []spine.File{{Name: "a//b"}}, spine.ErrBadRequest, "empty part"},
		{"trailing slash", []spine.File{{Name: "a/"}}, spine.ErrBadRequest, "empty part"},
		{"backslash", []spine.File{{Name: `..\x`}}, spine.ErrBadRequest, "backslash"},
		{"nul", []spine.File{{Name: "a\x00b"}}, spine.ErrBadRequest, "control"},
		{"newline", []spine.File{{Name: "a\nb"}}, spine.ErrBadRequest, "control"},
		{"not utf-8", []spine.File{{Name: "a\xffb"}}, spine.ErrBadRequest, "UTF-8"},
		{"long part", []spine.File{{Name: strings.Repeat("a", 256)}}, spine.ErrBadRequest, "part of 256 bytes"},
		{"long name", []spine.File{{Name: strings.Repeat("a/", 600) + "b"}}, spine.ErrBadRequest, "over the limit"},
		{"twice", []spine.File{{Name: "a"}, {Name: "a"}}, spine.ErrBadRequest, "twice"},
		{"file and folder", []spine.File{{Name: "a"}, {Name: "a/b"}}, spine.ErrBadRequest, "folder"},
		{"folder and file", []spine.File{{Name: "a/b"}, {Name: "a"}}, spine.ErrBadRequest, "folder"},
		{"too many", []spine.File{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}, {Name: "e"}}, spine.ErrTooLarge, "5 files"},
		{"too big", []spine.File{{Name: "a", Data: make([]byte, 1001)}}, spine.ErrTooLarge, "1001 bytes"},
		{"no room", []spine.File{{Name: "a", Data: make([]byte, 900)}, {Name: "b/c/d/e", Data: make([]byte, 100)}}, spine.ErrTooLarge, "scratch"},
	} {
		out, err := r.Run(context.Background(), spine.Request{Source: "result = 1", Files: tc.files})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) || out != nil {
			t.Errorf("%s: %v, want %v saying %q", tc.name, err, tc.want, tc.says)
		}
	}
}

// FuzzCheckFileName: a name CheckFiles accepts is placed inside the working
// directory, and a program finds it there under the same name.
func FuzzCheckFileName(f *testing.F) {
	for _, seed := range []string{"a", "a/b.csv", "../x", "/x", "a/./b", "a//b", "é/ü", "a\\b", ".hidden", "..."} {
		f.Add(seed)
	}
	r := shared(f)
	f.Fuzz(func(t *testing.T, name string) {
		err := spine.CheckFileName(name)
		if err != nil {
			if !errors.Is(err, spine.ErrBadRequest) {
				t.Fatalf("%q: %v does not match ErrBadRequest", name, err)
			}
			return
		}
		if strings.HasPrefix(name, "/") || slices.Contains(strings.Split(name, "/"), "..") {
			t.Fatalf("%q accepted", name)
		}
		out, err := r.Run(context.Background(), spine.Request{Source: `import os
name = inputs["name"]
result = [os.path.abspath(name).startswith("/work/"), open(name, "rb").read().decode()]`,
			Inputs: map[string]any{"name": name}, Files: []spine.File{{Name: name, Data: []byte("ok")}}})
		if err != nil || string(out.Value) != `[true,"ok"]` {
			t.Fatalf("%q: %v %s", name, err, valueOf(out))
		}
	})
}

// TestScratchNoLeaks: runs that write files, leave them open, fill the tree
// and time out give back every goroutine and descriptor.
func TestScratchNoLeaks(t *testing.T) {
	if testing.Short() {
		t.Skip("600 runs; skipped with -short")
	}
	before := countResources()
	r, err := spine.New(context.Background(), spinetest.NewTools().Manifest(), &spine.Options{PoolSize: 2, ScratchSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	programs := []string{
		`open("a.csv", "w").write("x" * 1000)`,
		`f = open("/tmp/held", "w"); f.write("x")`,
		`import tempfile; t = tempfile.TemporaryFile(); t.write(b"x" * 100000)`,
		`open("big", "wb").write(b"x" * (2 << 20))`,
	}
	for i := 0; i < 600; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		src := programs[i%len(programs)]
		if i%100 == 99 {
			src = `f = open("x", "w")
while True: pass`
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Millisecond)
		}
		r.Run(ctx, spine.Request{Source: src, Files: []spine.File{{Name: "in/put", Data: []byte("in")}}})
		cancel()
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	before.check(t)
}
