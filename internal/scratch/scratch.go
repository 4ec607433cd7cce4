// Package scratch is a Guest's scratch file system: a tree of files and
// directories in the Host's memory, served to the Guest through wazero's
// experimental sys.FS (docs/rationale.md, "A scratch file system in memory,
// per run"). It holds the working directory and /tmp, is counted against
// Limits, and never names a Host file: there are no links of any kind.
//
// One FS serves one Guest for its whole life; what it serves is the current
// run's Tree, swapped in by Begin and dropped by End. A file or directory
// opened in one run is closed to every later run (EBADF), so a Python file
// object a session keeps cannot reach a later run's files; only the root
// directory, the preopen wazero keeps open, always means the current tree.
//
// An FS is used by one goroutine at a time, the one running its Guest.
package scratch

import (
	"io/fs"
	"strings"
	"sync/atomic"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// Limits bound one tree.
type Limits struct {
	// MaxBytes caps the bytes the tree holds: the memory its files' contents
	// take, plus EntryOverhead for each file and directory.
	MaxBytes int64
	// MaxEntries caps the files and directories in the tree (its root,
	// /work and /tmp not counted).
	MaxEntries int
}

// EntryOverhead is what a file or directory counts against Limits.MaxBytes
// besides its contents: about what its name, node and place in its
// directory take on the Host.
const EntryOverhead = 256

// MaxName and MaxPath bound a name and a whole path, in bytes, as Linux does.
const (
	MaxName = 255
	MaxPath = 4096
)

// WorkDir and TmpDir are the folders every tree starts with, relative to its
// root: the program's working directory and /tmp.
const (
	WorkDir = "work"
	TmpDir  = "tmp"
)

// WASI errno values an FS asks its Guest to see instead of wazero's EIO
// (Restate).
const (
	wasiEIO    = 29
	wasiENOSPC = 51
)

// FS is a Guest's scratch file system.
type FS struct {
	limits  Limits
	open    *atomic.Int64 // descriptors held open, shared with the Guest's other file systems
	tree    *Tree         // the current run's; nil between runs
	restate uint32        // the errno the last failure meant, where wazero can only say EIO
	clock   func() int64  // the trees' clock (SetClock); nil: the system's
}

// New returns an FS serving an empty tree, until the first Begin. open
// counts the files and directories held open through it.
func New(limits Limits, open *atomic.Int64) *FS {
	f := &FS{limits: limits, open: open}
	f.tree = newTree(limits, nil)
	return f
}

// Begin drops the current tree and serves a new, empty one, which it returns.
func (f *FS) Begin() *Tree {
	f.End()
	f.tree = newTree(f.limits, f.clock)
	return f.tree
}

// SetClock makes clock, in nanoseconds since the epoch, the time the trees
// Begin makes from now on give their files (nil: the system's). A recorded
// run's clock is its record's (the Guest sees these times through stat).
func (f *FS) SetClock(clock func() int64) { f.clock = clock }

// End drops the current tree: its contents are freed at once, and every
// file and directory still open in it answers EBADF from now on.
func (f *FS) End() {
	if f.tree != nil {
		f.tree.drop()
		f.tree = nil
	}
	f.restate = 0
}

// Tree is the tree being served, nil between runs.
func (f *FS) Tree() *Tree { return f.tree }

// Restate is the Guest's spine.errno for an errno a file function returned:
// ENOSPC where the FS failed for want of room (wazero can only say EIO),
// otherwise errno itself.
func (f *FS) Restate(errno uint32) uint32 {
	r := f.restate
	f.restate = 0
	if errno == wasiEIO && r != 0 {
		return r
	}
	return errno
}

// noSpace is a failure for want of room: EIO to wazero, ENOSPC to the Guest.
func (f *FS) noSpace() experimentalsys.Errno {
	f.restate = wasiENOSPC
	return experimentalsys.EIO
}

// Tree is one run's files.
type Tree struct {
	limits  Limits
	root    *node
	used    int64 // bytes counted against limits.MaxBytes
	entries int   // files and directories counted against limits.MaxEntries
	lastIno uint64
	dead    bool
	clock   func() int64 // nil: the system's
}

// now is the time a file or directory of the tree is made or changed.
func (t *Tree) now() int64 {
	if t.clock != nil {
		return t.clock()
	}
	return time.Now().UnixNano()
}

type node struct {
	ino     uint64
	dir     bool
	data    []byte           // a file's contents; cap(data) is what it counts
	kids    map[string]*node // a directory's entries
	perm    fs.FileMode
	atim    int64
	mtim    int64
	ctim    int64
	changed bool // written, created or moved by the program
	opens   int  // handles open on it
	removed bool // no longer in the tree; its room is given back at its last close
	counted bool // counts as an entry
}

func newTree(limits Limits, clock func() int64) *Tree {
	t := &Tree{limits: limits, clock: clock}
	t.root = t.newNode(true)
	for _, name := range []string{WorkDir, TmpDir} {
		d := t.newNode(true)
		d.perm = 0o777
		t.root.kids[name] = d
	}
	return t
}

func (t *Tree) newNode(dir bool) *node {
	t.lastIno++
	now := t.now()
	n := &node{ino: t.lastIno, dir: dir, perm: 0o644, atim: now, mtim: now, ctim: now}
	if dir {
		n.kids = map[string]*node{}
		n.perm = 0o755
	}
	return n
}

// add makes a counted entry in dir, when the limits allow it.
func (t *Tree) add(dir *node, name string, isDir bool) (*node, bool) {
	if t.entries >= t.limits.MaxEntries || t.used+EntryOverhead > t.limits.MaxBytes {
		return nil, false
	}
	n := t.newNode(isDir)
	n.counted, n.changed = true, true
	t.entries++
	t.used += EntryOverhead
	dir.kids[name] = n
	dir.mtim = n.mtim
	return n, true
}

// release gives back what a node removed from the tree counts, once nothing
// holds it open; a directory's entries with it.
func (t *Tree) release(n *node) {
	if !n.removed || n.opens > 0 || t.dead {
		return
	}
	t.used -= int64(cap(n.data))
	n.data = nil
	if n.counted {
		n.counted = false
		t.entries--
		t.used -= EntryOverhead
	}
	for _, kid := range n.kids {
		kid.removed = true
		t.release(kid)
	}
}

func (t *Tree) drop() {
	t.dead = true
	var free func(n *node)
	free = func(n *node) {
		n.data = nil
		for _, kid := range n.kids {
			free(kid)
		}
		n.kids = nil
	}
	free(t.root)
}

// resize makes n's contents size bytes long (zeros where it grows) within
// the limits.
func (t *Tree) resize(n *node, size int64) bool {
	if size < 0 || size > t.limits.MaxBytes {
		return false
	}
	old := int64(len(n.data))
	if size <= old {
		n.data = n.data[:size]
		if size < int64(cap(n.data))/4 { // give back what a shrunk file no longer needs
			t.setCap(n, size, size)
		}
		return true
	}
	if size <= int64(cap(n.data)) {
		n.data = n.data[:size]
		clear(n.data[old:])
		return true
	}
	room := t.limits.MaxBytes - t.used + int64(cap(n.data))
	if size > room {
		t.trim(n)
		if room = t.limits.MaxBytes - t.used + int64(cap(n.data)); size > room {
			return false
		}
	}
	t.setCap(n, size, min(max(size, 2*int64(cap(n.data)), 512), room))
	return true
}

// setCap gives n's contents a new array of capacity c holding size bytes.
func (t *Tree) setCap(n *node, size, c int64) {
	data := make([]byte, size, c)
	copy(data, n.data)
	t.used += c - int64(cap(n.data))
	n.data = data
}

// trim gives back the room every file but except holds beyond its size.
func (t *Tree) trim(except *node) {
	var walk func(n *node)
	walk = func(n *node) {
		for _, kid := range n.kids {
			if kid.dir {
				walk(kid)
			} else if kid != except && cap(kid.data) > len(kid.data) {
				t.setCap(kid, int64(len(kid.data)), int64(len(kid.data)))
			}
		}
	}
	walk(t.root)
}

// Used reports the bytes and entries the tree counts against its limits.
func (t *Tree) Used() (bytes int64, entries int) { return t.used, t.entries }

// resolve splits a path (relative to the root, as wazero gives it) and
// finds it: its directory, its last name and its node (nil when absent). The
// root is dir nil, name "".
func (t *Tree) resolve(path string) (dir *node, name string, n *node, errno experimentalsys.Errno) {
	if len(path) > MaxPath {
		return nil, "", nil, experimentalsys.ENAMETOOLONG
	}
	trailing := strings.HasSuffix(path, "/")
	var parts []string
	for _, p := range strings.Split(path, "/") {
		switch {
		case p == "" || p == ".":
		case p == "..":
			return nil, "", nil, experimentalsys.EPERM // wazero never passes one; nothing may escape
		case len(p) > MaxName:
			return nil, "", nil, experimentalsys.ENAMETOOLONG
		default:
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return nil, "", t.root, 0
	}
	dir = t.root
	for _, p := range parts[:len(parts)-1] {
		next := dir.kids[p]
		switch {
		case next == nil:
			return nil, "", nil, experimentalsys.ENOENT
		case !next.dir:
			return nil, "", nil, experimentalsys.ENOTDIR
		}
		dir = next
	}
	name = parts[len(parts)-1]
	n = dir.kids[name]
	if n != nil && trailing && !n.dir {
		return nil, "", nil, experimentalsys.ENOTDIR
	}
	return dir, name, n, 0
}

// current is the tree an operation acts on; EBADF between runs.
func (f *FS) current() (*Tree, experimentalsys.Errno) {
	f.restate = 0
	if f.tree == nil {
		return nil, experimentalsys.EBADF
	}
	return f.tree, 0
}

// OpenFile implements experimental/sys.FS.
func (f *FS) OpenFile(path string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	t, errno := f.current()
	if errno != 0 {
		return nil, errno
	}
	if flag&experimentalsys.O_CREAT != 0 && strings.HasSuffix(path, "/") {
		// open(2) makes no file by a folder's name, whatever is there.
		if _, _, _, errno := t.resolve(strings.TrimRight(path, "/")); errno != 0 {
			return nil, errno
		}
		return nil, experimentalsys.EISDIR
	}
	dir, name, n, errno := t.resolve(path)
	if errno != 0 {
		return nil, errno
	}
	access := flag & (experimentalsys.O_RDONLY | experimentalsys.O_RDWR | experimentalsys.O_WRONLY)
	writes := access == experimentalsys.O_RDWR || access == experimentalsys.O_WRONLY
	if n == nil {
		if flag&experimentalsys.O_CREAT == 0 || flag&experimentalsys.O_DIRECTORY != 0 {
			return nil, experimentalsys.ENOENT
		}
		var ok bool
		if n, ok = t.add(dir, name, false); !ok {
			return nil, f.noSpace()
		}
		n.perm = perm & 0o777
	} else {
		switch {
		case flag&experimentalsys.O_CREAT != 0 && flag&experimentalsys.O_EXCL != 0:
			return nil, experimentalsys.EEXIST
		case n.dir && (writes || flag&experimentalsys.O_TRUNC != 0):
			return nil, experimentalsys.EISDIR
		case !n.dir && flag&experimentalsys.O_DIRECTORY != 0:
			return nil, experimentalsys.ENOTDIR
		}
		if flag&experimentalsys.O_TRUNC != 0 && writes && len(n.data) > 0 {
			t.resize(n, 0)
			n.changed = true
			n.mtim = t.now()
		}
	}
	h := &handle{fs: f, tree: t, node: n, read: access != experimentalsys.O_WRONLY, write: writes,
		append: flag&experimentalsys.O_APPEND != 0}
	h.seeker.h = h
	if n == t.root {
		h.tree, h.node = nil, nil // the root is always the current tree's
	} else {
		n.opens++
	}
	f.open.Add(1)
	return h, 0
}

// Stat implements experimental/sys.FS.
func (f *FS) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	t, errno := f.current()
	if errno != 0 {
		return sys.Stat_t{}, errno
	}
	_, _, n, errno := t.resolve(path)
	if errno == 0 && n == nil {
		errno = experimentalsys.ENOENT
	}
	if errno != 0 {
		return sys.Stat_t{}, errno
	}
	return n.stat(), 0
}

// Lstat implements experimental/sys.FS: there are no links, so it is Stat.
func (f *FS) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) { return f.Stat(path) }

func (n *node) stat() sys.Stat_t {
	st := sys.Stat_t{Dev: 1, Ino: n.ino, Mode: n.perm, Nlink: 1, Size: int64(len(n.data)), Atim: n.atim, Mtim: n.mtim, Ctim: n.ctim}
	if n.dir {
		st.Mode |= fs.ModeDir
		st.Nlink = 2
		st.Size = 0
	}
	return st
}

// Mkdir implements experimental/sys.FS.
func (f *FS) Mkdir(path string, perm fs.FileMode) experimentalsys.Errno {
	t, errno := f.current()
	if errno != 0 {
		return errno
	}
	dir, name, n, errno := t.resolve(strings.TrimRight(path, "/")) // a folder's name may end in "/"
	switch {
	case errno != 0:
		return errno
	case n != nil:
		return experimentalsys.EEXIST
	}
	d, ok := t.add(dir, name, true)
	if !ok {
		return f.noSpace()
	}
	d.perm = perm & 0o777
	return 0
}

// Chmod implements experimental/sys.FS: it keeps the permission bits, which
// the FS does not enforce.
func (f *FS) Chmod(path string, perm fs.FileMode) experimentalsys.Errno {
	t, errno := f.current()
	if errno != 0 {
		return errno
	}
	_, _, n, errno := t.resolve(path)
	if errno == 0 && n == nil {
		errno = experimentalsys.ENOENT
	}
	if errno != 0 {
		return errno
	}
	n.perm = perm & 0o777
	return 0
}

// Rename implements experimental/sys.FS, as rename(2) does.
func (f *FS) Rename(from, to string) experimentalsys.Errno {
	t, errno := f.current()
	if errno != 0 {
		return errno
	}
	// As rename(2): both paths' folders are found, then what the first names;
	// a trailing slash on either wants folders.
	fromDir, fromName, n, errno := t.resolve(strings.TrimRight(from, "/"))
	if errno != 0 {
		return errno
	}
	toDir, toName, old, errno := t.resolve(strings.TrimRight(to, "/"))
	switch {
	case errno != 0:
		return errno
	case n == nil:
		return experimentalsys.ENOENT
	case (strings.HasSuffix(from, "/") || strings.HasSuffix(to, "/")) && (!n.dir || old != nil && !old.dir):
		return experimentalsys.ENOTDIR
	case fromDir == nil || toDir == nil:
		return experimentalsys.EPERM
	case old == n:
		return 0
	}
	if n.dir {
		for d := toDir; d != nil; d = t.parent(d) {
			if d == n {
				return experimentalsys.EINVAL // into itself
			}
		}
	}
	if old != nil {
		switch {
		case n.dir && !old.dir:
			return experimentalsys.ENOTDIR
		case !n.dir && old.dir:
			return experimentalsys.EISDIR
		case old.dir && len(old.kids) > 0:
			return experimentalsys.ENOTEMPTY
		}
		old.removed = true
		t.release(old)
	}
	delete(fromDir.kids, fromName)
	toDir.kids[toName] = n
	now := t.now()
	fromDir.mtim, toDir.mtim, n.ctim = now, now, now
	markChanged(n)
	return 0
}

// parent finds d's directory by a walk from the root (renames are rare; a
// node keeps no pointer up, so removing one never leaves a cycle).
func (t *Tree) parent(d *node) *node {
	var found *node
	var walk func(n *node) bool
	walk = func(n *node) bool {
		for _, kid := range n.kids {
			if kid == d {
				found = n
				return true
			}
			if kid.dir && walk(kid) {
				return true
			}
		}
		return false
	}
	walk(t.root)
	return found
}

func markChanged(n *node) {
	n.changed = true
	for _, kid := range n.kids {
		markChanged(kid)
	}
}

// Rmdir implements experimental/sys.FS.
func (f *FS) Rmdir(path string) experimentalsys.Errno {
	t, errno := f.current()
	if errno != 0 {
		return errno
	}
	dir, name, n, errno := t.resolve(path)
	switch {
	case errno != 0:
		return errno
	case n == nil:
		return experimentalsys.ENOENT
	case dir == nil:
		return experimentalsys.EPERM
	case !n.dir:
		return experimentalsys.ENOTDIR
	case len(n.kids) > 0:
		return experimentalsys.ENOTEMPTY
	}
	t.unlink(dir, name, n)
	return 0
}

// Unlink implements experimental/sys.FS. A file still open keeps its room
// until its last close.
func (f *FS) Unlink(path string) experimentalsys.Errno {
	t, errno := f.current()
	if errno != 0 {
		return errno
	}
	dir, name, n, errno := t.resolve(path)
	switch {
	case errno != 0:
		return errno
	case n == nil:
		return experimentalsys.ENOENT
	case n.dir:
		return experimentalsys.EISDIR
	}
	t.unlink(dir, name, n)
	return 0
}

// unlink takes n, named name in dir, out of the tree; what it counts is given
// back once nothing holds it open.
func (t *Tree) unlink(dir *node, name string, n *node) {
	delete(dir.kids, name)
	dir.mtim = t.now()
	n.removed = true
	t.release(n)
}

// Link implements experimental/sys.FS: the tree has no hard links (EPERM).
func (f *FS) Link(oldPath, newPath string) experimentalsys.Errno {
	f.restate = 0
	return experimentalsys.EPERM
}

// Symlink implements experimental/sys.FS: the tree has no symbolic links
// (EPERM), so no path in it can lead out of it.
func (f *FS) Symlink(oldPath, linkName string) experimentalsys.Errno {
	f.restate = 0
	return experimentalsys.EPERM
}

// Readlink implements experimental/sys.FS: nothing is a link (EINVAL).
func (f *FS) Readlink(path string) (string, experimentalsys.Errno) {
	if _, errno := f.Stat(path); errno != 0 {
		return "", errno
	}
	return "", experimentalsys.EINVAL
}

// Utimens implements experimental/sys.FS.
func (f *FS) Utimens(path string, atim, mtim int64) experimentalsys.Errno {
	t, errno := f.current()
	if errno != 0 {
		return errno
	}
	_, _, n, errno := t.resolve(path)
	if errno == 0 && n == nil {
		errno = experimentalsys.ENOENT
	}
	if errno != 0 {
		return errno
	}
	n.setTimes(atim, mtim)
	return 0
}

func (n *node) setTimes(atim, mtim int64) {
	if atim != experimentalsys.UTIME_OMIT {
		n.atim = atim
	}
	if mtim != experimentalsys.UTIME_OMIT {
		n.mtim = mtim
	}
}

var (
	_ experimentalsys.FS   = (*FS)(nil)
	_ experimentalsys.File = (*handle)(nil)
)
