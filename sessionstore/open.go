package sessionstore

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// Open returns the Store at rawURL: file:///DIR (a directory that exists;
// replicas sharing it write create-only across processes) or mem:// (a new
// store in this process's memory). A file:// store's max_bytes parameter
// bounds the bytes of its files, temporary ones included, as this process
// counts them (those there when it opens, and its own writes and deletes):
// a write past it fails with ErrFull and keeps nothing. A prefix query parameter puts every key
// under that prefix. The stores in the cloud (s3://, gs://, azblob://) are
// opened by the module github.com/spine-run/spine/cloudstore, whose Open
// takes these URLs too.
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("sessionstore: %w", err)
	}
	switch u.Scheme {
	case "file", "mem":
	case "s3", "gs", "azblob":
		return nil, fmt.Errorf("sessionstore: %s:// is opened by github.com/spine-run/spine/cloudstore (the spine command takes it)", u.Scheme)
	default:
		return nil, fmt.Errorf("sessionstore: %q: the scheme must be file or mem (s3, gs and azblob: github.com/spine-run/spine/cloudstore)", u.Scheme)
	}
	q := u.Query()
	pre := q.Get("prefix")
	q.Del("prefix")
	q.Del("no_tmp_dir") // a file is always written beside its place
	var maxBytes int64
	if v := q.Get("max_bytes"); q.Has("max_bytes") && u.Scheme == "file" {
		if maxBytes, err = strconv.ParseInt(v, 10, 64); err != nil || maxBytes < 1 {
			return nil, fmt.Errorf("sessionstore: %s: max_bytes %q is not a positive number of bytes", Redact(u), v)
		}
		q.Del("max_bytes")
	}
	for name := range q {
		takes := "prefix"
		if u.Scheme == "file" {
			takes = "prefix and max_bytes"
		}
		return nil, fmt.Errorf("sessionstore: %s: unknown parameter %q (a %s:// store takes %s)", Redact(u), name, u.Scheme, takes)
	}
	var b Bucket
	if u.Scheme == "file" {
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("sessionstore: %s: a file:// URL names a directory on this machine (file:///DIR)", Redact(u))
		}
		if b, err = openDir(filepath.FromSlash(u.Path), maxBytes); err != nil {
			return nil, fmt.Errorf("sessionstore: opening %s: %w", Redact(u), err)
		}
	} else {
		b = newMem()
	}
	if pre != "" {
		b = &prefixed{b: b, prefix: pre}
	}
	return New(b), nil
}

// Redact is u without its user information and query, which may hold
// secrets: how an error names a store.
func Redact(u *url.URL) string {
	c := *u
	c.User, c.RawQuery = nil, ""
	return c.String()
}

// prefixed is a Bucket whose keys are b's under prefix.
type prefixed struct {
	b      Bucket
	prefix string
}

func (p *prefixed) List(ctx context.Context, prefix string) ([]string, error) {
	keys, err := p.b.List(ctx, p.prefix+prefix)
	for i, k := range keys {
		keys[i] = strings.TrimPrefix(k, p.prefix)
	}
	return keys, err
}

func (p *prefixed) Attributes(ctx context.Context, key string) (map[string]string, error) {
	return p.b.Attributes(ctx, p.prefix+key)
}

func (p *prefixed) NewReader(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	return p.b.NewReader(ctx, p.prefix+key)
}

func (p *prefixed) Create(ctx context.Context, key string, md map[string]string, write func(io.Writer) error) error {
	return p.b.Create(ctx, p.prefix+key, md, write)
}

func (p *prefixed) Delete(ctx context.Context, key string) error {
	return p.b.Delete(ctx, p.prefix+key)
}

func (p *prefixed) Close() error { return p.b.Close() }
