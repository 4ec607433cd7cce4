//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sessionstore

// lockFile is no lock where flock(2) does not exist: a file:// store's
// create-only writes are exact within one process only (docs/scaling.md).
func lockFile(string) (unlock func(), err error) { return func() {}, nil }
