package sessionstore

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// What every replica that keeps sessions in a Store does the same way, the
// HTTP API's (package service) and the MCP server's (package mcpserver):
// who owns a session, when a session is written, and what a replica may
// load.

// OwnerOf is how the owner a token digest names is kept in Meta.Owner: the
// digest in hex; "" for the zero digest (no token).
func OwnerOf(digest [sha256.Size]byte) string {
	if digest == ([sha256.Size]byte{}) {
		return ""
	}
	return hex.EncodeToString(digest[:])
}

// Owner is the owner of the sessions made with token: the hex SHA-256 of
// the token, never the token; "" for no token.
func Owner(token string) string {
	if token == "" {
		return ""
	}
	return OwnerOf(sha256.Sum256([]byte(token)))
}

// OwnedBy reports whether m's session belongs to owner, in constant time.
func (m Meta) OwnedBy(owner string) bool {
	return subtle.ConstantTimeCompare([]byte(m.Owner), []byte(owner)) == 1
}

// WritePolicy is when a replica writes a session it runs to its Store.
type WritePolicy string

const (
	// WriteRun writes after each run, before answering it: an answered run
	// is in the store.
	WriteRun WritePolicy = "run"
	// WriteAnswer writes after answering: a crash, or a lost race, loses
	// the runs answered since the last write that landed.
	WriteAnswer WritePolicy = "answer"
	// WriteHibernate writes only when the session leaves the replica's live
	// Guests (it hibernates, is evicted, or the replica stops): the replica
	// is sticky, and a crash loses everything since.
	WriteHibernate WritePolicy = "hibernate"
)

// ParseWritePolicy returns the policy named s.
func ParseWritePolicy(s string) (WritePolicy, error) {
	switch p := WritePolicy(s); p {
	case WriteRun, WriteAnswer, WriteHibernate:
		return p, nil
	}
	return "", fmt.Errorf("session write policy %q: it is run, answer or hibernate", s)
}

// ImageError is a stored snapshot that a replica of another Guest build
// took: a replica of that build (Image) can serve it.
type ImageError struct{ Image string }

func (e *ImageError) Error() string {
	return "the session's snapshot was taken by another Guest build (image " + e.Image + "); a replica of that build can serve it"
}

// Load opens the newest generation of id for owner on a replica whose
// Guest image key is image, as Get does (the reader is the caller's to
// close): ErrNotFound when there is none, it is deleted, or another
// owner's (which a caller must not tell apart from none); an *ImageError
// when another build took it; ErrTooLarge over max bytes.
func Load(ctx context.Context, st Store, id, owner, image string, max int64) (io.ReadCloser, Meta, error) {
	if CheckID(id) != nil {
		return nil, Meta{}, ErrNotFound
	}
	rd, meta, err := st.Get(ctx, id, max)
	if err != nil {
		return nil, Meta{}, err
	}
	switch {
	case !meta.OwnedBy(owner):
		rd.Close()
		return nil, Meta{}, ErrNotFound
	case meta.Image != image:
		rd.Close()
		return nil, Meta{}, &ImageError{meta.Image}
	}
	return rd, meta, nil
}

// Claim returns the generation after which a replica writes a new session
// it makes under id for owner: 0 when the store holds none, or the
// tombstone's when owner deleted it (the new line continues the old, so a
// stale replica cannot bring the deleted one back). An id another owner
// holds is ErrTaken; a live session of owner's is ErrConflict: it was
// written since the caller looked, and is to be loaded, not replaced.
func Claim(ctx context.Context, st Store, id, owner string) (uint64, error) {
	if err := CheckID(id); err != nil {
		return 0, err
	}
	meta, err := st.Head(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	case !meta.OwnedBy(owner):
		return 0, ErrTaken
	case !meta.Deleted:
		return 0, fmt.Errorf("%w: %s was written meanwhile", ErrConflict, id)
	}
	return meta.Generation, nil
}

// ErrTaken is a session id another owner holds in the store.
var ErrTaken = errors.New("sessionstore: that session id is another owner's")
