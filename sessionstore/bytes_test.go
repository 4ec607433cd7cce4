package sessionstore_test

import (
	"context"
	"io"

	"github.com/spine-run/spine/sessionstore"
)

// putBytes writes data as a Put of meta, capped at 1 MiB.
func putBytes(ctx context.Context, st sessionstore.Store, id string, data []byte, meta sessionstore.Meta) error {
	return st.Put(ctx, id, meta, 1<<20, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// getBytes reads what a Get of id at most max bytes returns, whole.
func getBytes(ctx context.Context, st sessionstore.Store, id string, max int64) ([]byte, sessionstore.Meta, error) {
	r, meta, err := st.Get(ctx, id, max)
	if err != nil {
		return nil, meta, err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	return data, meta, err
}
