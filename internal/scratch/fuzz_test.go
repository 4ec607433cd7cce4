package scratch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// FuzzOps runs a sequence of file operations, which the fuzzer draws from its
// bytes, on a scratch FS and, the same operations, on a folder of the Host's
// own file system through the system calls, and wants the same outcome from
// both every step: the errno, the bytes read and written, what a stat or a
// listing shows. After every step the tree's count of bytes and entries must
// be what its files and folders hold, within its limits, and the descriptors
// it counts open must be those the sequence holds.
//
// A new run (Begin) closes the sequence's handles on both sides, after
// checking that every handle of the ended run answers EBADF.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 2, 0x43, 2, 0, 9, 5, 0, 0, 20, 1, 0})
	f.Add([]byte{8, 4, 0, 0, 5, 0x42, 11, 4, 9, 10, 5, 0, 12, 9, 13, 4})
	f.Add([]byte{0, 2, 0x4b, 3, 0, 200, 40, 6, 0, 3, 11, 2, 3, 14, 0, 1, 0, 9})
	f.Add([]byte{8, 4, 8, 5, 0, 6, 0x43, 11, 4, 10, 9, 4, 12, 10, 13, 1, 9, 4})
	f.Add([]byte{0, 0, 2, 1, 11, 0, 2, 11, 11, 0, 2, 3, 8, 0, 11, 10, 0, 4, 12, 0, 4})
	f.Fuzz(func(t *testing.T, program []byte) {
		if len(program) > 512 {
			return
		}
		(&opsRun{t: t}).run(program)
	})
}

// opPaths are the paths a sequence names, relative to the root: the two
// folders every tree has, files and folders in them, a path through a file,
// and one with a trailing slash.
var opPaths = []string{
	"work", "tmp", "work/a", "work/b", "work/d", "work/d/a", "work/d/e", "work/d/e/f",
	"tmp/a", "tmp/d", "work/a/x", "work/d/",
}

// opFlags are the open flags a sequence uses, with the system's for each.
var opFlags = []struct {
	scratch experimentalsys.Oflag
	system  int
}{
	{experimentalsys.O_RDONLY, syscall.O_RDONLY},
	{experimentalsys.O_WRONLY | experimentalsys.O_CREAT, syscall.O_WRONLY | syscall.O_CREAT},
	{experimentalsys.O_RDWR | experimentalsys.O_CREAT, syscall.O_RDWR | syscall.O_CREAT},
	{experimentalsys.O_RDWR | experimentalsys.O_CREAT | experimentalsys.O_EXCL, syscall.O_RDWR | syscall.O_CREAT | syscall.O_EXCL},
	{experimentalsys.O_WRONLY | experimentalsys.O_CREAT | experimentalsys.O_TRUNC, syscall.O_WRONLY | syscall.O_CREAT | syscall.O_TRUNC},
	{experimentalsys.O_WRONLY | experimentalsys.O_CREAT | experimentalsys.O_APPEND, syscall.O_WRONLY | syscall.O_CREAT | syscall.O_APPEND},
	{experimentalsys.O_RDWR | experimentalsys.O_APPEND, syscall.O_RDWR | syscall.O_APPEND},
	{experimentalsys.O_RDONLY | experimentalsys.O_DIRECTORY, syscall.O_RDONLY | syscall.O_DIRECTORY},
	{experimentalsys.O_RDWR, syscall.O_RDWR},
	{experimentalsys.O_RDWR | experimentalsys.O_TRUNC, syscall.O_RDWR | syscall.O_TRUNC},
}

const opSlots = 4

type opsRun struct {
	t       *testing.T
	fs      *FS
	open    atomic.Int64
	root    string // the Host folder
	files   [opSlots]experimentalsys.File
	fds     [opSlots]int
	step    int
	program []byte
	at      int
}

func (r *opsRun) next() int {
	if r.at >= len(r.program) {
		return 0
	}
	b := r.program[r.at]
	r.at++
	return int(b)
}

func (r *opsRun) run(program []byte) {
	r.program = program
	r.fs = New(Limits{MaxBytes: 1 << 20, MaxEntries: 64}, &r.open)
	r.fs.Begin()
	r.root = r.t.TempDir()
	r.resetHost()
	for i := range r.fds {
		r.fds[i] = -1
	}
	defer r.closeAll()
	for r.at < len(r.program) {
		r.step++
		r.do(r.next())
		r.checkAccounting()
	}
}

func (r *opsRun) resetHost() {
	entries, err := os.ReadDir(r.root)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(r.root, e.Name())); err != nil {
			r.t.Fatal(err)
		}
	}
	for _, d := range []string{WorkDir, TmpDir} {
		if err := os.Mkdir(filepath.Join(r.root, d), 0o777); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *opsRun) host(path string) string {
	p := filepath.Join(r.root, path)
	if len(path) > 0 && path[len(path)-1] == '/' {
		p += "/"
	}
	return p
}

func errnoOf(err error) experimentalsys.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return experimentalsys.EIO
	}
	return experimentalsys.UnwrapOSError(errno)
}

func (r *opsRun) same(what string, scratch, system any) {
	r.t.Helper()
	if fmt.Sprint(scratch) != fmt.Sprint(system) {
		r.t.Fatalf("step %d, %s: scratch %v, system %v", r.step, what, scratch, system)
	}
}

func (r *opsRun) closeSlot(i int) {
	if r.files[i] != nil {
		if errno := r.files[i].Close(); errno != 0 {
			r.t.Fatalf("step %d: close: %v", r.step, errno)
		}
		r.files[i] = nil
	}
	if r.fds[i] >= 0 {
		syscall.Close(r.fds[i])
		r.fds[i] = -1
	}
}

func (r *opsRun) closeAll() {
	for i := range r.files {
		r.closeSlot(i)
	}
	if n := r.open.Load(); n != 0 {
		r.t.Fatalf("%d descriptors counted open after every handle closed", n)
	}
}

func (r *opsRun) do(op int) {
	path := func() string { return opPaths[r.next()%len(opPaths)] }
	slot := r.next() % opSlots
	size := func() int { return r.next() * 16 }
	data := func() []byte { return bytes.Repeat([]byte{byte('a' + r.step%26)}, r.next()%64+1) }
	f, fd := r.files[slot], r.fds[slot]
	if onHandle := op%16 >= 2 && op%16 <= 7 || op%16 == 15; onHandle && f == nil {
		return // an operation on a handle, with none in the slot
	}
	switch op % 16 {
	case 0: // open
		p := path()
		fl := opFlags[r.next()%len(opFlags)]
		r.closeSlot(slot)
		file, errno := r.fs.OpenFile(p, fl.scratch, 0o644)
		hfd, err := syscall.Open(r.host(p), fl.system|syscall.O_CLOEXEC, 0o644)
		r.same("open "+p, errno, errnoOf(err))
		if errno == 0 {
			r.files[slot] = file
		}
		if err == nil {
			r.fds[slot] = hfd
		}
	case 1: // close
		r.closeSlot(slot)
	case 2: // write
		b := data()
		n, errno := f.Write(b)
		m, err := syscall.Write(fd, b)
		r.same("write", [2]any{n, errno}, [2]any{max(m, 0), errnoOf(err)})
	case 3: // pwrite
		b, off := data(), int64(size())
		if f.IsAppend() {
			return // Linux writes at the end of a file opened to append, whatever the offset
		}
		n, errno := f.Pwrite(b, off)
		m, err := syscall.Pwrite(fd, b, off)
		r.same("pwrite", [2]any{n, errno}, [2]any{max(m, 0), errnoOf(err)})
	case 4: // read
		b1 := make([]byte, r.next()%128+1)
		b2 := make([]byte, len(b1))
		n, errno := f.Read(b1)
		m, err := syscall.Read(fd, b2)
		r.same("read", [2]any{string(b1[:n]), errno}, [2]any{string(b2[:max(m, 0)]), errnoOf(err)})
	case 5: // pread
		off := int64(size())
		b1, b2 := make([]byte, 64), make([]byte, 64)
		n, errno := f.Pread(b1, off)
		m, err := syscall.Pread(fd, b2, off)
		r.same("pread", [2]any{string(b1[:n]), errno}, [2]any{string(b2[:max(m, 0)]), errnoOf(err)})
	case 6: // truncate
		n := int64(size())
		errno := f.Truncate(n)
		err := syscall.Ftruncate(fd, n)
		if errno == experimentalsys.EBADF && errors.Is(err, syscall.EINVAL) {
			return // a handle not open for writing: WASI says EBADF, Linux EINVAL
		}
		r.same("truncate", errno, errnoOf(err))
	case 7: // seek
		off, whence := int64(size())-128, r.next()%3
		pos, errno := f.Seek(off, whence)
		hpos, err := syscall.Seek(fd, off, whence)
		if isDir, _ := f.IsDir(); isDir {
			return // a directory's offset is its own cookie on each side
		}
		r.same("seek", [2]any{pos, errno}, [2]any{max(hpos, 0), errnoOf(err)})
	case 8: // mkdir
		p := path()
		r.same("mkdir "+p, r.fs.Mkdir(p, 0o755), errnoOf(syscall.Mkdir(r.host(p), 0o755)))
	case 9: // rmdir
		p := path()
		if p == WorkDir || p == TmpDir {
			return // the two folders every tree has are the Host's to keep
		}
		r.same("rmdir "+p, r.fs.Rmdir(p), errnoOf(syscall.Rmdir(r.host(p))))
	case 10: // unlink
		p := path()
		r.same("unlink "+p, r.fs.Unlink(p), errnoOf(syscall.Unlink(r.host(p))))
	case 11: // rename
		from, to := path(), path()
		if from == WorkDir || from == TmpDir || to == WorkDir || to == TmpDir {
			return
		}
		r.same("rename "+from+" "+to, r.fs.Rename(from, to), errnoOf(syscall.Rename(r.host(from), r.host(to))))
	case 12: // stat
		p := path()
		st, errno := r.fs.Stat(p)
		var hst syscall.Stat_t
		err := syscall.Stat(r.host(p), &hst)
		if errno != 0 || err != nil {
			r.same("stat "+p, errno, errnoOf(err))
			return
		}
		isDir := hst.Mode&syscall.S_IFMT == syscall.S_IFDIR
		size := hst.Size
		if isDir {
			size = 0
		}
		r.same("stat "+p, [2]any{st.Mode.IsDir(), st.Size}, [2]any{isDir, size})
	case 13: // list a folder, as a fresh handle sees it
		p := path()
		file, errno := r.fs.OpenFile(p, experimentalsys.O_RDONLY|experimentalsys.O_DIRECTORY, 0)
		entries, err := os.ReadDir(r.host(p))
		if errno != 0 {
			r.same("list "+p, errno, errnoOf(err))
			return
		}
		defer file.Close()
		if err != nil {
			r.t.Fatalf("step %d, list %s: scratch lists it, system: %v", r.step, p, err)
		}
		dirents, errno := file.Readdir(-1)
		if errno != 0 {
			r.t.Fatalf("step %d, list %s: %v", r.step, p, errno)
		}
		var got, want []string
		for _, d := range dirents {
			got = append(got, fmt.Sprint(d.Name, d.Type.IsDir()))
		}
		for _, e := range entries {
			want = append(want, fmt.Sprint(e.Name(), e.IsDir()))
		}
		slices.Sort(got)
		r.same("list "+p, got, want)
	case 14: // a new run: every handle of the last one answers EBADF
		r.fs.Begin()
		for i, file := range r.files {
			if file == nil {
				continue
			}
			if _, errno := file.Pread(make([]byte, 1), 0); errno != experimentalsys.EBADF {
				if isDir, _ := file.IsDir(); !isDir || errno != experimentalsys.EISDIR {
					r.t.Fatalf("step %d: a handle of the last run read with errno %v", r.step, errno)
				}
			}
			if _, errno := file.Stat(); errno != experimentalsys.EBADF {
				r.t.Fatalf("step %d: a handle of the last run: stat errno %v", r.step, errno)
			}
			r.closeSlot(i)
		}
		r.resetHost()
	case 15: // fstat
		st, errno := f.Stat()
		var hst syscall.Stat_t
		err := syscall.Fstat(fd, &hst)
		size := hst.Size
		if hst.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			size = 0
		}
		r.same("fstat", [2]any{st.Size, errno}, [2]any{size, errnoOf(err)})
	}
}

// checkAccounting: the tree counts what its files and folders hold, its own
// and those removed but still open, within its limits.
func (r *opsRun) checkAccounting() {
	t := r.fs.Tree()
	held := map[*node]bool{}
	var walk func(n *node)
	walk = func(n *node) {
		held[n] = true
		for _, kid := range n.kids {
			walk(kid)
		}
	}
	walk(t.root)
	open := 0
	for _, file := range r.files {
		if file == nil {
			continue
		}
		open++
		if h := file.(*handle); h.tree == t && h.node != nil {
			walk(h.node)
		}
	}
	var bytes int64
	entries := 0
	for n := range held {
		bytes += int64(cap(n.data))
		if n.counted {
			entries++
			bytes += EntryOverhead
		}
	}
	used, counted := t.Used()
	if used != bytes || counted != entries {
		r.t.Fatalf("step %d: the tree counts %d bytes, %d entries; it holds %d bytes, %d entries",
			r.step, used, counted, bytes, entries)
	}
	if used > t.limits.MaxBytes || counted > t.limits.MaxEntries {
		r.t.Fatalf("step %d: %d bytes, %d entries, past the limits", r.step, used, counted)
	}
	if n := r.open.Load(); n != int64(open) {
		r.t.Fatalf("step %d: %d descriptors counted open, %d held", r.step, n, open)
	}
}
