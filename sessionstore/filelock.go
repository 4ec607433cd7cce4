package sessionstore

// A file:// store is a directory that replicas on one machine (or on one
// shared file system) may write at once. gocloud's fileblob makes a
// create-only write by checking that the file is absent and then renaming
// its temporary file into place, under a lock of its own process only: two
// processes writing the same generation at the same instant could both
// pass the check, and the later rename would replace the earlier. So a
// Store over file:// takes an exclusive flock(2) on one lock file in the
// directory around that check and rename (commitLock): the writes of every
// process using this package are then create-only across processes. The
// lock is held for the check and the rename only, never while a snapshot
// streams to its temporary file.
//
// flock is advisory: a process writing the directory without this package
// is not held back. On a network file system it is as good as that file
// system's locks (NFS v4 has them; check yours). Where flock does not
// exist (filelock_other.go) there is no lock, and docs/scaling.md says so.

// lockName is the lock file, at the directory's root, out of every key the
// store lists.
const lockName = ".sessionstore.lock"

// commitLock takes the store's lock for the end of a create-only write;
// unlock releases it. A store other than file:// has none.
func (s *blobStore) commitLock() (unlock func(), err error) {
	if s.lockPath == "" {
		return func() {}, nil
	}
	return lockFile(s.lockPath)
}
