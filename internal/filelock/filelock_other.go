//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package filelock

import "os"

// Lock is no lock where flock(2) does not exist: a file:// store's
// create-only writes are exact within one process only (docs/scaling.md).
func Lock(string) (unlock func(), err error) { return func() {}, nil }

// Hold holds nothing where flock(2) does not exist.
func Hold(*os.File) error { return nil }

// TryHold cannot tell a live writer's temporary file from a stale one
// where flock(2) does not exist: it reports false, and none is removed.
func TryHold(*os.File) bool { return false }
