package spine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spine-run/spine/internal/filelock"
)

// A Runner with SessionOptions.Dir hibernates its sessions into a folder of
// its own there, DIR/.spine-runner-XXXX, and holds a flock on the folder's
// lock file for as long as it lives. New removes the folders of Runners
// whose lock nobody holds: their process ended without Close (kill -9, a
// crash), and their sessions with it. Close removes the Runner's own. So
// several processes may share DIR, and none leaves snapshots behind it.
// The folder is made under another name (.spine-new-XXXX), locked, and only
// then renamed, so that a sweep never takes a folder being made for a
// folder abandoned; such a folder left over a minute is a process's that
// died making it, and is swept too.

const (
	sessionDirPrefix = ".spine-runner-"
	sessionDirNew    = ".spine-new-"
	sessionDirLock   = "lock"
)

// sessionDir is a Runner's folder under SessionOptions.Dir.
type sessionDir struct {
	path string
	lock *os.File
}

// openSessionDir sweeps dir of abandoned Runners' folders and makes this
// Runner's.
func openSessionDir(dir string) (*sessionDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spine: Sessions.Dir: %w", err)
	}
	sweepSessionDirs(dir)
	tmp, err := os.MkdirTemp(dir, sessionDirNew+"*")
	if err != nil {
		return nil, fmt.Errorf("spine: Sessions.Dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(tmp, sessionDirLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		if err = filelock.Hold(lock); err != nil {
			lock.Close()
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("spine: Sessions.Dir: %w", err)
	}
	path := filepath.Join(dir, sessionDirPrefix+strings.TrimPrefix(filepath.Base(tmp), sessionDirNew))
	if err := os.Rename(tmp, path); err != nil {
		lock.Close()
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("spine: Sessions.Dir: %w", err)
	}
	return &sessionDir{path: path, lock: lock}, nil
}

// sweepSessionDirs removes the folders in dir of Runners no process holds.
func sweepSessionDirs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), sessionDirPrefix) && !abandonedNew(e) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		lock, err := os.OpenFile(filepath.Join(path, sessionDirLock), os.O_RDWR, 0)
		if err != nil {
			if os.IsNotExist(err) && strings.HasPrefix(e.Name(), sessionDirNew) {
				os.RemoveAll(path) // its maker died before making the lock
			}
			continue // else not a folder this code made
		}
		if filelock.TryHold(lock) {
			os.RemoveAll(path)
		}
		lock.Close()
	}
}

// abandonedNew reports whether e is a folder a Runner began to make
// (.spine-new-*) more than a minute ago: one that is being made is renamed
// within moments, so such a folder is of a process that died making it.
// The sweep then takes it only if its lock, when it has one, is free.
func abandonedNew(e os.DirEntry) bool {
	if !strings.HasPrefix(e.Name(), sessionDirNew) {
		return false
	}
	info, err := e.Info()
	return err == nil && time.Since(info.ModTime()) > time.Minute
}

// close removes the folder and lets its lock go.
func (d *sessionDir) close() {
	if d == nil {
		return
	}
	d.lock.Close() // first: where an open file cannot be removed (Windows), it would keep the folder
	os.RemoveAll(d.path)
}
