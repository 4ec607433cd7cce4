// Package atomicfile writes a file whole or not at all: into a temporary
// file in the same folder, which is then put in place with a rename (or a
// link), so that a reader finds the former file or the new one, never a
// part. The temporary file is made by os.CreateTemp: mode 0600, readable by
// its owner only, and so is the file it becomes.
package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Options change how a file is written. The zero value renames without
// syncing.
type Options struct {
	// Sync flushes the file to stable storage before it is put in place.
	Sync bool

	// Keep leaves a file already at the path as it is (the first one
	// written stays): the new file is linked into place, not renamed, and
	// dropped when the path exists, with an error that is fs.ErrExist. On
	// a file system without links it is renamed.
	Keep bool

	// Pattern names the temporary file as os.CreateTemp's pattern does.
	// Default "." + the file's name + ".*.tmp".
	Pattern string
}

// Write writes data to path (see the package's doc).
func Write(path string, data []byte, opts Options) error {
	return WriteFunc(path, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	}, opts)
}

// WriteFunc makes the temporary file, has fill write it, and puts it in
// place at path. When fill or any step fails, path is left as it was and
// the temporary file is removed.
func WriteFunc(path string, fill func(*os.File) error, opts Options) error {
	pattern := opts.Pattern
	if pattern == "" {
		pattern = "." + filepath.Base(path) + ".*.tmp"
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), pattern)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // nothing left to remove once renamed
	err = fill(tmp)
	if err == nil && opts.Sync {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if opts.Keep {
		err := os.Link(tmp.Name(), path)
		if err == nil || errors.Is(err, fs.ErrExist) {
			return err
		}
		// A file system without links: rename.
	}
	return os.Rename(tmp.Name(), path)
}
