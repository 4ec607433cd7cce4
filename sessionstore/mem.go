package sessionstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"
)

// memBucket is a Bucket in memory: a mem:// store, one per Open, gone with
// its process. It keeps every object whole in memory.
type memBucket struct {
	mu      sync.Mutex
	objects map[string]memObject
}

type memObject struct {
	data []byte // never changed once stored
	md   map[string]string
}

func newMem() *memBucket { return &memBucket{objects: map[string]memObject{}} }

func (b *memBucket) List(ctx context.Context, prefix string) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var keys []string
	for k := range b.objects {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

func (b *memBucket) get(key string) (memObject, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objects[key]
	if !ok {
		return memObject{}, fmt.Errorf("%s: %w", key, fs.ErrNotExist)
	}
	return o, nil
}

func (b *memBucket) Attributes(ctx context.Context, key string) (map[string]string, error) {
	o, err := b.get(key)
	return maps.Clone(o.md), err
}

func (b *memBucket) NewReader(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	o, err := b.get(key)
	if err != nil {
		return nil, 0, err
	}
	return io.NopCloser(bytes.NewReader(o.data)), int64(len(o.data)), nil
}

func (b *memBucket) Create(ctx context.Context, key string, md map[string]string, write func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.objects[key]; ok {
		return fmt.Errorf("%s: %w", key, fs.ErrExist)
	}
	b.objects[key] = memObject{data: buf.Bytes(), md: maps.Clone(md)}
	return nil
}

func (b *memBucket) Delete(ctx context.Context, key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.objects, key)
	return nil
}

func (b *memBucket) Close() error { return nil }
