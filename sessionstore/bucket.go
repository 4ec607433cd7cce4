package sessionstore

import (
	"context"
	"io"
)

// A Bucket is an object store as a Store needs one: keys of '/'-separated
// names, each holding immutable bytes and a little metadata, listed in key
// order, written create-only. New writes the protocol of generations and
// owners (this package's doc) once over it. This package has a Bucket over
// a directory (file://) and one in memory (mem://); the module
// github.com/spine-run/spine/cloudstore has one over gocloud.dev/blob, for
// s3://, gs:// and azblob://.
//
// An object that does not exist is an error that is fs.ErrNotExist
// (errors.Is); a create-only write of a key that exists is fs.ErrExist.
// Its methods are safe for concurrent use.
type Bucket interface {
	// List returns the keys that begin with prefix, in ascending order. A
	// key that goes (or comes) while it lists may be in the listing or not,
	// but is never an error.
	List(ctx context.Context, prefix string) ([]string, error)

	// Attributes returns the metadata of the object at key.
	Attributes(ctx context.Context, key string) (map[string]string, error)

	// NewReader opens the object at key, streamed, and returns its size.
	NewReader(ctx context.Context, key string) (io.ReadCloser, int64, error)

	// Create makes the object at key, create-only, with metadata md and the
	// bytes write writes to the writer it is given (streamed to the store,
	// within WriteMemory). The object becomes visible whole, with its
	// metadata, only once write returned nil: when write fails or ctx ends,
	// nothing of it is kept and Create returns that error. fs.ErrExist when
	// the key exists.
	Create(ctx context.Context, key string, md map[string]string, write func(io.Writer) error) error

	// Delete removes the object at key; removing one that does not exist
	// is not an error.
	Delete(ctx context.Context, key string) error

	// Close releases the bucket's connections.
	Close() error
}
