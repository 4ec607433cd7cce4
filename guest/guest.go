// Package guest holds the built Spine Guest: CPython 3.11.2 for wasm32-wasi as a
// WASI reactor (spine.wasm) and its standard library as precompiled .pyc in a
// stored zip (python311.zip). Both are built by guest/build.sh from Debian's
// packages and committed, so users and CI never need the WASI toolchain.
//
// manifest.json records the hash of every input of that build; TestSourcesMatchManifest
// fails when a Guest source changed without a rebuild.
package guest

import (
	"bytes"
	_ "embed"
	"io"
	"io/fs"
	"time"
)

// Wasm is the stripped Guest module.
//
//go:embed artifact/spine.wasm
var Wasm []byte

// StdlibZip is the standard library and the Guest's own Python modules.
//
//go:embed artifact/python311.zip
var StdlibZip []byte

// Manifest is the JSON record of the build's inputs and outputs.
//
//go:embed artifact/manifest.json
var Manifest []byte

// License is CPython's licence, which applies to the Guest artifact.
//
//go:embed artifact/LICENSE.python
var License string

// StdlibMount is the Guest folder that holds python311.zip; the Guest's
// sys.path names the zip inside it.
const StdlibMount = "/usr/local/lib"

// StdlibZipName is the name of the archive inside StdlibMount.
const StdlibZipName = "python311.zip"

// StdlibFS returns a read-only file system that holds only the archive, to be
// mounted at StdlibMount. zip is not copied and must not change.
func StdlibFS(zip []byte) fs.FS {
	return LibFS(File{Name: StdlibZipName, Data: zip})
}

// File is one file of the Guest's library folder.
type File struct {
	Name string // a name without slashes
	Data []byte
}

// LibFS returns a read-only file system of files at its root (the standard
// library's archive and the package archives beside it), to be mounted at
// StdlibMount. The files are not copied and must not change.
func LibFS(files ...File) fs.FS {
	return filesFS(files)
}

// filesFS is a read-only fs.FS with a few files at its root.
type filesFS []File

func (f filesFS) Open(name string) (fs.File, error) {
	if name == "." {
		return &rootDir{fs: f}, nil
	}
	for _, file := range f {
		if file.Name == name {
			return &openFile{info: fileInfo{name: name, size: int64(len(file.Data))}, Reader: bytes.NewReader(file.Data)}, nil
		}
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

type fileInfo struct {
	name string
	size int64
	dir  bool
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.size }
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return i.dir }
func (i fileInfo) Sys() any           { return nil }
func (i fileInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (i fileInfo) Type() fs.FileMode          { return i.Mode().Type() }
func (i fileInfo) Info() (fs.FileInfo, error) { return i, nil }

// openFile is the archive opened for reading; bytes.Reader gives Read, ReadAt and Seek.
type openFile struct {
	info fileInfo
	*bytes.Reader
}

func (f *openFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *openFile) Close() error               { return nil }

type rootDir struct {
	fs   filesFS
	next int // the entries ReadDir returned so far
}

func (d *rootDir) Stat() (fs.FileInfo, error) { return fileInfo{name: ".", dir: true}, nil }
func (d *rootDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: fs.ErrInvalid}
}
func (d *rootDir) Close() error { return nil }
func (d *rootDir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.fs[d.next:]
	if n > 0 && len(rest) == 0 {
		return nil, io.EOF
	}
	if n > 0 && len(rest) > n {
		rest = rest[:n]
	}
	d.next += len(rest)
	entries := make([]fs.DirEntry, len(rest))
	for i, file := range rest {
		entries[i] = fileInfo{name: file.Name, size: int64(len(file.Data))}
	}
	return entries, nil
}
