package engine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// usableCacheFolder returns dir when compiled code can be cached there: it
// exists or can be made, and a file can be written in it. Else it returns ""
// (compiled code is then cached in memory only) and why, for the log: a
// cache folder the process cannot write (a read-only root, a home that does
// not exist) is never a reason to fail. With seed, a folder filled by an
// earlier run (spine warm), every file of seed that dir lacks is copied in
// first, so a new process starts from what was compiled ahead of time.
func usableCacheFolder(dir, seed string) (string, error) {
	if dir == "" {
		return "", nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	probe, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return "", err
	}
	probe.Close()
	os.Remove(probe.Name())
	if seed != "" && filepath.Clean(seed) != filepath.Clean(dir) {
		if err := seedCacheFolder(dir, seed); err != nil {
			return dir, fmt.Errorf("linking the seed cache %s: %w", seed, err)
		}
	}
	return dir, nil
}

// seedCacheFolder puts into dir a symbolic link to every regular file under
// seed that dir does not hold (a copy where no link can be made); the
// temporary files of a writer that died are left out. A link costs nothing
// where a copy of the seed (tens of MB, its images sparse) would take a
// new replica a good part of its start. Nothing writes a cache file in
// place: a file is replaced by renaming a new one over it, which replaces
// the link and leaves the seed as it is, and one found damaged is removed,
// which removes the link.
func seedCacheFolder(dir, seed string) error {
	return filepath.WalkDir(seed, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == seed && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll // no seed: nothing to copy
			}
			return err
		}
		rel, err := filepath.Rel(seed, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dir, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular() || strings.HasSuffix(d.Name(), ".tmp") || strings.HasPrefix(d.Name(), ".probe-"):
			return nil
		}
		if _, err := os.Lstat(target); err == nil {
			return nil
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		if os.Symlink(abs, target) == nil {
			return nil
		}
		return copyFileAtomic(target, path)
	})
}

// copyFileAtomic copies the file src to dst, whole or not at all.
func copyFileAtomic(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// hasCompiledCode reports whether module's folder under the cache folder dir
// holds a compiled entry with its record: a compile will be a load.
func hasCompiledCode(dir string, module []byte) bool {
	if dir == "" {
		return false
	}
	found := false
	codeEntries(codeFolder(dir, module), func(path string, info os.FileInfo) {
		if strings.HasSuffix(path, sumSuffix) {
			found = true
		}
	})
	return found
}

// logger is cfg's Logger, or one that drops everything.
func (cfg *Config) logger() *slog.Logger {
	if cfg.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return cfg.Logger
}
