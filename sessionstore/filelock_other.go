//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sessionstore

import "os"

// lockFile is no lock where flock(2) does not exist: a file:// store's
// create-only writes are exact within one process only (docs/scaling.md).
func lockFile(string) (unlock func(), err error) { return func() {}, nil }

// holdFile holds nothing where flock(2) does not exist.
func holdFile(*os.File) error { return nil }

// tryHold cannot tell a live writer's temporary file from a stale one
// where flock(2) does not exist: it reports false, and none is removed.
func tryHold(*os.File) bool { return false }
