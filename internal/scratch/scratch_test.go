package scratch

import (
	"io"
	"sync/atomic"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

func newFS(t *testing.T, limits Limits) (*FS, *atomic.Int64) {
	t.Helper()
	var open atomic.Int64
	f := New(limits, &open)
	f.Begin()
	return f, &open
}

// TestAccounting: what a tree counts comes back to zero when its files go,
// a removed file open keeps its room to its last close, and a handle of an
// ended run answers EBADF.
func TestAccounting(t *testing.T) {
	f, open := newFS(t, Limits{MaxBytes: 1 << 20, MaxEntries: 10})
	h, errno := f.OpenFile("work/a", experimentalsys.O_RDWR|experimentalsys.O_CREAT, 0o644)
	if errno != 0 {
		t.Fatal(errno)
	}
	if _, errno := h.Write(make([]byte, 100000)); errno != 0 {
		t.Fatal(errno)
	}
	if errno := f.Unlink("work/a"); errno != 0 {
		t.Fatal(errno)
	}
	if used, entries := f.Tree().Used(); used < 100000 || entries != 1 {
		t.Fatalf("an unlinked open file counts %d bytes, %d entries", used, entries)
	}
	if n, errno := h.Pread(make([]byte, 10), 0); n != 10 || errno != 0 {
		t.Fatalf("read of an unlinked open file: %d %v", n, errno)
	}
	h.Close()
	if used, entries := f.Tree().Used(); used != 0 || entries != 0 || open.Load() != 0 {
		t.Fatalf("after the last close: %d bytes, %d entries, %d open", used, entries, open.Load())
	}

	// Past the limit: EIO to wazero, ENOSPC to the Guest, once.
	h, _ = f.OpenFile("tmp/b", experimentalsys.O_WRONLY|experimentalsys.O_CREAT, 0o644)
	if _, errno := h.Pwrite([]byte("x"), 1<<20); errno != experimentalsys.EIO || f.Restate(29) != 51 || f.Restate(29) != 29 {
		t.Fatalf("a write past the limit: %v", errno)
	}
	if errno := h.Truncate(2 << 20); errno != experimentalsys.EIO {
		t.Fatalf("a truncate past the limit: %v", errno)
	}
	f.Begin() // the next run
	if _, errno := h.Write([]byte("x")); errno != experimentalsys.EBADF {
		t.Fatalf("a handle of the last run: %v", errno)
	}
	if _, errno := h.(*handle).Seek(0, io.SeekStart); errno != experimentalsys.EBADF {
		t.Fatalf("a seek on a handle of the last run: %v", errno)
	}
	if h.Close() != 0 || open.Load() != 0 {
		t.Fatal("closing a handle of the last run")
	}
	if _, errno := f.Stat("tmp/b"); errno != experimentalsys.ENOENT {
		t.Fatalf("the last run's file: %v", errno)
	}
	f.End()
	if _, errno := f.Stat("work"); errno != experimentalsys.EBADF {
		t.Fatalf("between runs: %v", errno)
	}
}

// TestTree: renames, folders and names as rename(2), rmdir(2) and open(2)
// have them.
func TestTree(t *testing.T) {
	f, _ := newFS(t, Limits{MaxBytes: 1 << 20, MaxEntries: 10})
	must := func(errno experimentalsys.Errno) {
		t.Helper()
		if errno != 0 {
			t.Fatal(errno)
		}
	}
	must(f.Mkdir("work/d", 0o755))
	must(f.Mkdir("work/d/e", 0o755))
	for _, c := range []struct {
		name string
		got  experimentalsys.Errno
		want experimentalsys.Errno
	}{
		{"mkdir twice", f.Mkdir("work/d", 0o755), experimentalsys.EEXIST},
		{"rename into itself", f.Rename("work/d", "work/d/e/f"), experimentalsys.EINVAL},
		{"rmdir not empty", f.Rmdir("work/d"), experimentalsys.ENOTEMPTY},
		{"unlink a folder", f.Unlink("work/d"), experimentalsys.EISDIR},
		{"rename the root", f.Rename("", "work/x"), experimentalsys.EPERM},
		{"through a missing folder", f.Mkdir("work/no/x", 0o755), experimentalsys.ENOENT},
		{"dot-dot", f.Mkdir("work/../x", 0o755), experimentalsys.EPERM},
		{"long name", f.Mkdir("work/"+string(make([]byte, 256)), 0o755), experimentalsys.ENAMETOOLONG},
		{"symlink", f.Symlink("/etc/passwd", "work/p"), experimentalsys.EPERM},
		{"link", f.Link("work/d", "work/l"), experimentalsys.EPERM},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	h, errno := f.OpenFile("work/d/e/file", experimentalsys.O_WRONLY|experimentalsys.O_CREAT|experimentalsys.O_EXCL, 0o644)
	must(errno)
	h.Write([]byte("data"))
	h.Close()
	if _, errno := f.OpenFile("work/d/e/file", experimentalsys.O_CREAT|experimentalsys.O_EXCL, 0o644); errno != experimentalsys.EEXIST {
		t.Fatalf("O_EXCL on a file there: %v", errno)
	}
	if _, errno := f.OpenFile("work/d/e/file/", experimentalsys.O_RDONLY, 0); errno != experimentalsys.ENOTDIR {
		t.Fatalf("a file with a trailing slash: %v", errno)
	}
	must(f.Rename("work/d", "tmp/moved"))
	st, errno := f.Stat("tmp/moved/e/file")
	if errno != 0 || st.Size != 4 {
		t.Fatalf("after a rename: %+v %v", st, errno)
	}
	if files, _ := f.Tree().Changed(10, 100); len(files) != 0 {
		t.Fatalf("files under /tmp are not the working directory's: %v", files)
	}
	must(f.Rename("tmp/moved", "work/back"))
	if files, _ := f.Tree().Changed(10, 100); len(files) != 1 || files[0].Name != "back/e/file" || string(files[0].Data) != "data" {
		t.Fatalf("Changed: %v", files)
	}
}
