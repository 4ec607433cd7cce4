//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"fmt"
	"os"
	"syscall"
)

// Lock takes an exclusive flock on the file at path, made if missing.
// Each call opens the file anew, so that two goroutines of one process
// exclude each other as two processes do.
func Lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("a lock file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil // closing the file releases its lock
}

// Hold takes an exclusive flock on f, a temporary file its writer
// holds while it writes it: until f is closed (or the process dies), a
// cleaner's TryHold of the file fails.
func Hold(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return err
		}
	}
}

// TryHold reports whether f's flock was free and is now held by f: no
// live writer holds the file.
func TryHold(f *os.File) bool {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err == nil
		}
	}
}
