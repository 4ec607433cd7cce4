// Package sessionstore keeps session snapshots in an object store, so that
// every replica of a service can serve every session under one id
// (docs/scaling.md, docs/rationale.md "Sessions in an object store").
//
// A session is a line of generations: generation 1 is written when the
// session is made, and each later write is generation n+1 of a replica that
// holds generation n. Each generation is its own immutable object, written
// create-only:
//
//	sessions/<id>/<generation, 20 decimal digits>
//
// Two replicas that both hold generation n and both write n+1 race on one
// create-only write, which the store lets exactly one of them make; the
// other gets ErrConflict. A replica holding an older generation m < n
// writes m+1, which either exists (ErrConflict) or was already swept, and
// then the newer object it finds beside its own makes it ErrConflict too:
// an older generation never takes the place of a newer one. A deleted
// session is a generation with the deleted mark (a tombstone), so that a
// stale replica cannot bring it back.
//
// Every write is a whole snapshot with its metadata: the generation, the
// owner (a hash of the token that made the session, never the token) and
// the snapshot's image key. Store is the interface; New is its one
// implementation, written over a small object store (Bucket). Open opens
// a file:// or mem:// store; the module github.com/spine-run/spine/cloudstore
// opens s3://, gs:// and azblob:// through gocloud.dev/blob, so that this
// module requires no cloud SDK.
package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Meta is what is stored beside a snapshot.
type Meta struct {
	Generation uint64 // 1 for a new session; each write is the one before plus 1
	Owner      string // who may use the session: hex SHA-256 of its token, "" without tokens
	Image      string // the snapshot's image key (spine.SnapshotImageKey): who can restore it
	Deleted    bool   // a tombstone: the session was deleted at this generation
}

// A Store keeps the snapshots of sessions by id. Its methods are safe for
// concurrent use, from one process or many.
type Store interface {
	// Head returns the newest generation's metadata, or ErrNotFound when
	// the session has none (a tombstone is returned: Deleted is set).
	Head(ctx context.Context, id string) (Meta, error)

	// Get opens the newest generation's snapshot and returns a reader of
	// it, the caller's to close, and its metadata; or ErrNotFound when
	// there is none or it is a tombstone. A snapshot over max bytes is
	// refused with ErrTooLarge, unread. The reader streams from the store:
	// reading it takes ReadMemory at most, whatever the snapshot's size.
	Get(ctx context.Context, id string, max int64) (io.ReadCloser, Meta, error)

	// Newer reports whether the store holds a generation after gen: a
	// replica holding gen live asks before each run (one existence check).
	Newer(ctx context.Context, id string, gen uint64) (bool, error)

	// Put writes generation meta.Generation, create-only, holding what
	// write writes to the writer it is given, which streams to the store
	// (taking WriteMemory at most, whatever the snapshot's size). The
	// generation becomes visible only once write returned nil and the whole
	// snapshot is stored: on an error of write, past max bytes
	// (ErrTooLarge) or when ctx ends, nothing of it is kept. ErrConflict
	// when that generation, or a later one, exists. Older generations are
	// swept once it is written.
	Put(ctx context.Context, id string, meta Meta, max int64, write func(io.Writer) error) error

	// PutOwned is Put for a session whose owner (meta.Owner) may keep at
	// most ownerMax bytes in the store across its sessions, each counted
	// at its newest generation's size: the snapshot must fit in max and in
	// what the owner's other sessions leave of ownerMax, or it is refused
	// with an *OwnerFullError (ErrTooLarge) and nothing of it is kept. The
	// owner's sessions are counted by an index in the store that only
	// PutOwned keeps (sessions written by Put are not in it); writes of one
	// owner racing on other sessions can each take what the others have
	// not yet recorded (docs/scaling.md gives the bound). ownerMax 0 is
	// Put.
	PutOwned(ctx context.Context, id string, meta Meta, max, ownerMax int64, write func(io.Writer) error) error

	// OwnerBytes returns the sessions of owner that PutOwned recorded, and
	// their bytes in the store.
	OwnerBytes(ctx context.Context, owner string) (sessions int, bytes int64, err error)

	// Delete writes a tombstone after the newest generation, sweeps the
	// older ones and removes the session from its owner's index. Deleting
	// a session that has none is not an error.
	Delete(ctx context.Context, id string) error

	// Close releases the store's connections.
	Close() error
}

var (
	// ErrNotFound is a session the store holds no snapshot of.
	ErrNotFound = errors.New("sessionstore: no such session")

	// ErrConflict is a write that lost: the generation it writes, or a
	// later one, is in the store already.
	ErrConflict = errors.New("sessionstore: the session has a newer generation")

	// ErrTooLarge is a snapshot over the caller's cap: a Get refuses it
	// unread, a Put keeps nothing of it.
	ErrTooLarge = errors.New("sessionstore: snapshot over the size cap")

	// ErrBadID is a session id that cannot be a key.
	ErrBadID = errors.New("sessionstore: bad session id")
)

// MaxIDLength is the longest session id: ids are keys, and a key is hostile
// input until checked.
const MaxIDLength = 64

// CheckID reports whether id can name a session: 1 to MaxIDLength bytes of
// ASCII letters, digits, '-' and '_'. No '/', '.', space or control byte
// reaches a key.
func CheckID(id string) error {
	if len(id) == 0 || len(id) > MaxIDLength {
		return fmt.Errorf("%w: %d bytes; an id has 1 to %d", ErrBadID, len(id), MaxIDLength)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%w: byte %d is %q; an id has only letters, digits, '-' and '_'", ErrBadID, i, c)
		}
	}
	return nil
}
