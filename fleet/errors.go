package fleet

// StoreError is a store that failed.
type StoreError struct{ Err error }

func (e *StoreError) Error() string { return "the session store failed: " + e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// ConflictError is a write that lost to another replica's
// (sessionstore.ErrConflict).
type ConflictError struct{ Err error }

func (e *ConflictError) Error() string {
	return "another replica ran this session at the same time and its run was stored first; this run's effect on the session is undone (" + e.Err.Error() + ")"
}
func (e *ConflictError) Unwrap() error { return e.Err }

// ImageError is a stored snapshot that a replica of another Guest build
// took: a replica of that build (Image, its image key) can serve it.
type ImageError struct{ Image string }

func (e *ImageError) Error() string {
	return "the session's snapshot was taken by another Guest build (image " + e.Image + "); a replica of that build can serve it"
}

// StoredSnapshotError is a session whose newest stored snapshot this
// replica cannot restore: damaged, or over its Options.MaxSnapshot or its
// sessions' memory (a replica with more memory may restore it). It is the
// server's fault, not the request's: the front doors answer it as one
// (5xx), and the Fleet logs it with the session's id.
type StoredSnapshotError struct {
	ID  string
	Err error
}

func (e *StoredSnapshotError) Error() string {
	return "the stored snapshot of session " + e.ID + " cannot be restored by this server (the server's fault, not the request's; delete the session, or restore it from a snapshot of your own): " + e.Err.Error()
}
func (e *StoredSnapshotError) Unwrap() error { return e.Err }

// NotStoredError is a run whose state could not be snapshotted to store
// (files open, over the snapshot cap, over the owner's store bytes).
type NotStoredError struct{ Err error }

func (e *NotStoredError) Error() string {
	return "the run's state could not be stored, so its effect on the session is undone: " + e.Err.Error()
}
func (e *NotStoredError) Unwrap() error { return e.Err }

// unrestorable is the *StoredSnapshotError of id's generation gen (0: not
// known), logged with the session's id (never its owner's token).
func (f *Fleet) unrestorable(id string, gen uint64, err error) error {
	f.opts.Logger.Error("a stored session's snapshot cannot be restored by this server", "session", id, "generation", gen, "error", err)
	return &StoredSnapshotError{ID: id, Err: err}
}
