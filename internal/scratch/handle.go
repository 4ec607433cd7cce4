package scratch

import (
	"io"
	"io/fs"
	"slices"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// handle is an open file or directory.
type handle struct {
	seeker[int64, experimentalsys.Errno]
	fs     *FS
	tree   *Tree // the tree it was opened in; nil for the root, which is always the current tree's
	node   *node
	read   bool
	write  bool
	append bool
	closed bool
	pos    int64
	names  []string // a directory's entries, listed at its first Readdir since a rewind
	listed bool
}

// target is the node the handle acts on: EBADF once closed or once its run
// has ended.
func (h *handle) target() (*Tree, *node, experimentalsys.Errno) {
	h.fs.restate = 0
	switch {
	case h.closed || h.fs.tree == nil:
		return nil, nil, experimentalsys.EBADF
	case h.tree == nil:
		return h.fs.tree, h.fs.tree.root, 0
	case h.tree != h.fs.tree:
		return nil, nil, experimentalsys.EBADF
	}
	return h.tree, h.node, 0
}

func (h *handle) Dev() (uint64, experimentalsys.Errno) { return 1, 0 }

func (h *handle) Ino() (sys.Inode, experimentalsys.Errno) {
	_, n, errno := h.target()
	if errno != 0 {
		return 0, errno
	}
	return n.ino, 0
}

func (h *handle) IsDir() (bool, experimentalsys.Errno) {
	_, n, errno := h.target()
	if errno != 0 {
		return false, errno
	}
	return n.dir, 0
}

func (h *handle) IsAppend() bool { return h.append }

func (h *handle) SetAppend(enable bool) experimentalsys.Errno {
	_, n, errno := h.target()
	if errno != 0 {
		return errno
	}
	if n.dir {
		return experimentalsys.EISDIR
	}
	h.append = enable
	return 0
}

func (h *handle) Stat() (sys.Stat_t, experimentalsys.Errno) {
	_, n, errno := h.target()
	if errno != 0 {
		return sys.Stat_t{}, errno
	}
	return n.stat(), 0
}

func (h *handle) Read(buf []byte) (int, experimentalsys.Errno) {
	n, errno := h.Pread(buf, h.pos)
	h.pos += int64(n)
	return n, errno
}

func (h *handle) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	_, n, errno := h.target()
	switch {
	case errno != 0:
		return 0, errno
	case n.dir:
		return 0, experimentalsys.EISDIR
	case !h.read:
		return 0, experimentalsys.EBADF
	case off < 0:
		return 0, experimentalsys.EINVAL
	case off >= int64(len(n.data)):
		return 0, 0
	}
	return copy(buf, n.data[off:]), 0
}

// seeker gives handle sys.File's Seek, which answers an Errno where
// io.Seeker answers an error. go vet's check of standard method signatures
// wants io.Seeker's for every method named Seek it finds declared; declared on
// a generic type, whose signature it cannot read as io.Seeker's, it is let be.
type seeker[O ~int64, E ~uint16] struct{ h *handle }

func (s seeker[O, E]) Seek(offset O, whence int) (O, E) {
	pos, errno := s.h.seek(int64(offset), whence)
	return O(pos), E(errno)
}

func (h *handle) seek(offset int64, whence int) (int64, experimentalsys.Errno) {
	_, n, errno := h.target()
	if errno != 0 {
		if !h.closed && offset == 0 && whence == io.SeekCurrent {
			// Telling the position reads nothing of a file, so a handle
			// of an ended run answers it: Python tells before it closes a
			// file open for reading and writing, and the close must work.
			return h.pos, 0
		}
		return 0, errno
	}
	if n.dir {
		if offset != 0 || whence != io.SeekStart {
			return 0, experimentalsys.EINVAL
		}
		h.names, h.listed = nil, false
		return 0, 0
	}
	var pos int64
	switch whence {
	case io.SeekStart:
		pos = offset
	case io.SeekCurrent:
		pos = h.pos + offset
	case io.SeekEnd:
		pos = int64(len(n.data)) + offset
	default:
		return 0, experimentalsys.EINVAL
	}
	if pos < 0 || (offset > 0 && pos < h.pos && whence == io.SeekCurrent) {
		return 0, experimentalsys.EINVAL
	}
	h.pos = pos
	return pos, 0
}

func (h *handle) Readdir(count int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	_, n, errno := h.target()
	switch {
	case errno != 0:
		return nil, errno
	case !n.dir:
		return nil, experimentalsys.EBADF
	}
	if !h.listed {
		h.names = make([]string, 0, len(n.kids))
		for name := range n.kids {
			h.names = append(h.names, name)
		}
		slices.Sort(h.names)
		h.listed = true
	}
	var out []experimentalsys.Dirent
	for len(h.names) > 0 && (count <= 0 || len(out) < count) {
		name := h.names[0]
		h.names = h.names[1:]
		kid := n.kids[name]
		if kid == nil { // removed since it was listed
			continue
		}
		d := experimentalsys.Dirent{Ino: kid.ino, Name: name}
		if kid.dir {
			d.Type = fs.ModeDir
		}
		out = append(out, d)
	}
	return out, 0
}

func (h *handle) Write(buf []byte) (int, experimentalsys.Errno) {
	_, n, errno := h.target()
	if errno != 0 {
		return 0, errno
	}
	if h.append {
		h.pos = int64(len(n.data))
	}
	w, errno := h.Pwrite(buf, h.pos)
	h.pos += int64(w)
	return w, errno
}

func (h *handle) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	t, n, errno := h.target()
	switch {
	case errno != 0:
		return 0, errno
	case !h.write: // a folder is never open for writing: EBADF, as Linux says
		return 0, experimentalsys.EBADF
	case n.dir:
		return 0, experimentalsys.EISDIR
	case off < 0:
		return 0, experimentalsys.EINVAL
	case len(buf) == 0:
		return 0, 0
	case off > t.limits.MaxBytes:
		return 0, h.fs.noSpace()
	}
	if end := off + int64(len(buf)); end > int64(len(n.data)) && !t.resize(n, end) {
		return 0, h.fs.noSpace()
	}
	copy(n.data[off:], buf)
	n.changed = true
	n.mtim = t.now()
	return len(buf), 0
}

func (h *handle) Truncate(size int64) experimentalsys.Errno {
	t, n, errno := h.target()
	switch {
	case errno != 0:
		return errno
	case !h.write:
		return experimentalsys.EBADF
	case n.dir:
		return experimentalsys.EISDIR
	case size < 0:
		return experimentalsys.EINVAL
	}
	if !t.resize(n, size) {
		return h.fs.noSpace()
	}
	n.changed = true
	n.mtim = t.now()
	return 0
}

func (h *handle) Sync() experimentalsys.Errno {
	_, _, errno := h.target()
	return errno
}

func (h *handle) Datasync() experimentalsys.Errno { return h.Sync() }

func (h *handle) Utimens(atim, mtim int64) experimentalsys.Errno {
	_, n, errno := h.target()
	if errno != 0 {
		return errno
	}
	n.setTimes(atim, mtim)
	return 0
}

// Close gives back the handle's descriptor, and the room of a removed file
// it was the last to hold, once; closing a handle of an ended run is
// allowed.
func (h *handle) Close() experimentalsys.Errno {
	if h.closed {
		return 0
	}
	h.closed = true
	h.fs.open.Add(-1)
	if h.node != nil {
		h.node.opens--
		h.tree.release(h.node)
	}
	h.names = nil
	return 0
}
