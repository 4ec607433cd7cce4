package engine

import (
	"context"
	"io"
	"io/fs"
	"sync/atomic"

	"github.com/spine-run/spine/internal/scratch"
)

// descriptors is the part of a Guest's state that lives outside its linear
// memory: the WASI descriptor table, which wazero keeps on the Host. Linear
// memory is reset to the image after every run; the table cannot be (wazero
// does not expose it), so it is accounted for instead (docs/rationale.md,
// "One Guest state"):
//
//   - the descriptors every Guest holds, 0–2 (stdio), 3 (the preopened
//     standard library folder) and 4 (the preopened scratch tree, "/"), are
//     not the run's: closing or moving one is allowed, as natively, but marks
//     the Guest broken;
//   - every file and directory the Guest opens goes through fs or scratch,
//     which count those held open; a Guest holding more than it held when it
//     was made is not reused;
//   - a run may hold at most limit descriptors of its own; past it path_open
//     fails with EMFILE before anything is opened, which bounds the Host
//     memory a run's descriptors take.
//
// The checks happen in the Host functions spine.fd_close, spine.fd_renumber
// and spine.path_open, which the instrumented Guest calls before the WASI
// functions of the same names (internal/wasm).
type descriptors struct {
	fs.FS
	scratch  *scratch.FS  // the scratch tree, mounted at "/"
	open     atomic.Int64 // files and directories opened through FS or scratch and not closed
	baseline int64        // open when the Guest was ready for its first run
	limit    int64        // descriptors a run may hold beyond baseline
	broken   atomic.Bool  // a descriptor of 0–4 was closed or moved
	watched  bool         // the Guest calls the checks; without them nothing is known
}

// imageDescriptors is how many descriptors a new Guest holds: stdin, stdout,
// stderr, the preopened standard library folder and the scratch tree.
const imageDescriptors = 5

// WASI errno values the descriptor checks answer with.
const (
	wasiErrnoSuccess = 0
	wasiErrnoBADF    = 8  // bad file descriptor
	wasiErrnoMFILE   = 33 // too many open files
)

func newDescriptors(fsys fs.FS, limits scratch.Limits, limit int, watched bool) *descriptors {
	d := &descriptors{FS: fsys, limit: int64(limit), watched: watched}
	d.scratch = scratch.New(limits, &d.open)
	return d
}

// ready records the table as the Guest's own: what later runs must leave.
func (d *descriptors) ready() { d.baseline = d.open.Load() }

// intact reports whether the table is as it was when the Guest was ready: no
// image descriptor closed and nothing left open. A Guest that does not call
// the checks is never known to be intact.
func (d *descriptors) intact() bool {
	return d.watched && !d.broken.Load() && d.open.Load() == d.baseline
}

// beforeClose is spine.fd_close: closing an image descriptor is allowed (the
// program sees what native Python would) but the Guest is not used again.
func (d *descriptors) beforeClose(fd int32) uint32 {
	if fd >= 0 && fd < imageDescriptors {
		d.broken.Store(true)
	}
	return wasiErrnoSuccess
}

// beforeRenumber is spine.fd_renumber: moving a descriptor onto or off
// 0–4 (stdio; wazero refuses only the preopen) marks the Guest broken, as a
// close would; a number past what a run may hold is refused (EBADF), so the
// table cannot be grown to it.
func (d *descriptors) beforeRenumber(from, to int32) uint32 {
	if from < imageDescriptors || to < imageDescriptors {
		d.broken.Store(true)
	}
	if to < 0 || int64(to) >= imageDescriptors+d.baseline+d.limit {
		return wasiErrnoBADF
	}
	return wasiErrnoSuccess
}

// beforeOpen is spine.path_open: EMFILE once the run holds limit descriptors.
func (d *descriptors) beforeOpen() uint32 {
	if d.open.Load()-d.baseline >= d.limit {
		return wasiErrnoMFILE
	}
	return wasiErrnoSuccess
}

// descriptorsKey is the context key under which an instance's descriptors
// travel into spine.fd_close and spine.path_open. Without it (a Guest
// starting, an image being captured) the checks allow everything.
type descriptorsKey struct{}

func descriptorsFrom(ctx context.Context) *descriptors {
	d, _ := ctx.Value(descriptorsKey{}).(*descriptors)
	return d
}

// Open counts what it opens, files and directories alike.
func (d *descriptors) Open(name string) (fs.File, error) {
	f, err := d.FS.Open(name)
	if err != nil {
		return nil, err
	}
	d.open.Add(1)
	switch f := f.(type) {
	case seekerFile:
		return &countedFile{seekerFile: f, counted: counted{fs: d}}, nil
	case fs.ReadDirFile:
		return &countedDir{ReadDirFile: f, counted: counted{fs: d}}, nil
	}
	return &countedPlain{File: f, counted: counted{fs: d}}, nil
}

// counted gives back its count once, however often Close is called.
type counted struct {
	fs     *descriptors
	closed atomic.Bool
}

func (c *counted) release() {
	if c.closed.CompareAndSwap(false, true) {
		c.fs.open.Add(-1)
	}
}

// seekerFile is a regular file of the Guest's file system: wazero reads it
// with Seek and ReadAt, which the wrapper must keep.
type seekerFile interface {
	fs.File
	io.Seeker
	io.ReaderAt
}

type countedFile struct {
	seekerFile
	counted
}

func (f *countedFile) Close() error {
	f.release()
	return f.seekerFile.Close()
}

type countedDir struct {
	fs.ReadDirFile
	counted
}

func (f *countedDir) Close() error {
	f.release()
	return f.ReadDirFile.Close()
}

type countedPlain struct {
	fs.File
	counted
}

func (f *countedPlain) Close() error {
	f.release()
	return f.File.Close()
}
