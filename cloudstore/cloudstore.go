// Package cloudstore opens the session stores in the cloud: s3:// (any
// S3-compatible server), gs:// and azblob://, through gocloud.dev/blob. It
// is a module of its own so that the library's module
// (github.com/spine-run/spine) requires no cloud SDK: the protocol of
// generations and owners is sessionstore's, written once over a
// sessionstore.Bucket, and this package adapts a gocloud bucket to it.
package cloudstore

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/spine-run/spine/sessionstore"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	_ "gocloud.dev/blob/gcsblob"   // gs://
	_ "gocloud.dev/blob/s3blob"    // s3://, any S3-compatible server
	"gocloud.dev/gcerrors"
)

// Open returns the Store at rawURL: s3://BUCKET (endpoint, region and
// use_path_style in the query, as gocloud reads them, for any
// S3-compatible server), gs://BUCKET or azblob://CONTAINER; file:///DIR
// and mem:// are sessionstore.Open's. A prefix query parameter puts every
// key under that prefix. Credentials come from the environment, as each
// cloud's SDK reads them.
func Open(ctx context.Context, rawURL string) (sessionstore.Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("sessionstore: %w", err)
	}
	switch u.Scheme {
	case "s3", "gs", "azblob":
	case "file", "mem":
		return sessionstore.Open(ctx, rawURL)
	default:
		return nil, fmt.Errorf("sessionstore: %q: the scheme must be s3, gs, azblob, file or mem", u.Scheme)
	}
	b, err := blob.OpenBucket(ctx, rawURL)
	if err != nil {
		// gocloud's error may quote the whole URL, whose query may hold a
		// secret.
		msg := strings.ReplaceAll(err.Error(), rawURL, sessionstore.Redact(u)+"?…")
		return nil, fmt.Errorf("sessionstore: opening %s: %s", sessionstore.Redact(u), msg)
	}
	return sessionstore.New(NewBucket(b)), nil
}

// NewBucket is the sessionstore.Bucket over b; its Close closes b.
func NewBucket(b *blob.Bucket) sessionstore.Bucket {
	gb := &bucket{b: b}
	var client *s3.Client
	if b.As(&client) {
		gb.s3 = client
	}
	return gb
}

// bucket is a sessionstore.Bucket over a gocloud bucket.
type bucket struct {
	b  *blob.Bucket
	s3 *s3.Client // s3:// only: the client, for the uploads' options
}

// notExist makes gocloud's NotFound fs.ErrNotExist, as a Bucket answers.
func notExist(err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	return err
}

func (g *bucket) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	it := g.b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return keys, nil // a listing is in key order
		}
		if err != nil {
			return nil, err
		}
		keys = append(keys, obj.Key)
	}
}

func (g *bucket) Attributes(ctx context.Context, key string) (map[string]string, error) {
	attrs, err := g.b.Attributes(ctx, key)
	if err != nil {
		return nil, notExist(err)
	}
	return attrs.Metadata, nil
}

func (g *bucket) NewReader(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	r, err := g.b.NewReader(ctx, key, nil)
	if err != nil {
		return nil, 0, notExist(err)
	}
	return r, r.Size(), nil
}

// The writes' buffers: an object store's upload is cut in parts of
// writeBuffer bytes, one in flight at a time (S3's smallest part is 5 MiB):
// sessionstore.WriteMemory is counted in them.
const writeBuffer = 5 << 20

func (g *bucket) Create(ctx context.Context, key string, md map[string]string, write func(io.Writer) error) error {
	// On any failure the write is aborted (its context canceled), which
	// every gocloud driver takes as: keep nothing.
	wctx, abort := context.WithCancel(ctx)
	defer abort()
	w, err := g.b.NewWriter(wctx, key, &blob.WriterOptions{
		IfNotExist:     true,
		ContentType:    "application/octet-stream",
		Metadata:       md,
		BufferSize:     writeBuffer,
		MaxConcurrency: 1,
		BeforeWrite:    g.uploadOptions,
	})
	if err != nil {
		return err
	}
	if err := write(w); err != nil {
		abort()
		w.Close()
		return err
	}
	err = w.Close()
	switch {
	case err == nil:
		return nil
	case gcerrors.Code(err) == gcerrors.FailedPrecondition:
		return fmt.Errorf("%s: %w", key, fs.ErrExist)
	case ctx.Err() != nil:
		return err
	}
	// Some stores answer a lost race otherwise (S3's 409 while another
	// conditional write of the key is in flight): the key is there.
	if ok, _ := g.b.Exists(ctx, key); ok {
		return fmt.Errorf("%s: %w (%w)", key, fs.ErrExist, err)
	}
	return err
}

// uploadOptions bounds the memory of an upload to S3 (gocloud's
// BeforeWrite): gocloud sets the part size and concurrency, but S3's
// transfer manager reads the first 16 MiB of an upload into one slice grown
// as it fills, before it decides on a multipart upload. The upload's client
// is made again with the same S3 client and checksum setting, and that
// threshold at one part. An upload that fails or is aborted is aborted in
// the store too, within abortTimeout even when its context ended, so that
// its parts do not linger.
func (g *bucket) uploadOptions(as func(any) bool) error {
	var tm *transfermanager.Client
	if g.s3 == nil || !as(&tm) {
		return nil
	}
	checksums := g.s3.Options().RequestChecksumCalculation
	*tm = *transfermanager.New(g.s3, func(o *transfermanager.Options) {
		o.PartSizeBytes = writeBuffer
		o.MultipartUploadThreshold = writeBuffer
		o.Concurrency = 1
		o.RequestChecksumCalculation = checksums
		o.FailTimeout = abortTimeout
	})
	return nil
}

// abortTimeout bounds the abort of a failed multipart upload.
const abortTimeout = 10 * time.Second

func (g *bucket) Delete(ctx context.Context, key string) error {
	if err := g.b.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return err
	}
	return nil
}

func (g *bucket) Close() error { return g.b.Close() }
