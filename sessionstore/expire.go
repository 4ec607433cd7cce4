package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Expire removes from st, a file:// store, every session whose newest
// object was written before before: all of its objects (generations and
// tombstones alike, so nothing of it stays) and its owner index entry. It
// returns how many sessions it removed. It is for a store that one process
// keeps for itself (spine serve --session-dir without --session-store),
// whose sessions would otherwise stay forever after the Runner closed them
// (SessionOptions.TTL); a store shared by replicas is expired by the
// store's own lifecycle rules (docs/scaling.md). A session written after
// before, or while it runs, is left, and so is one keep reports (nil:
// none), such as a session the process holds live. Only a file:// store
// knows when its objects were written: another is an error.
func Expire(ctx context.Context, st Store, before time.Time, keep func(id string) bool) (int, error) {
	s, ok := st.(*store)
	var mt modTimer
	if ok {
		mt, ok = s.b.(modTimer)
	}
	if !ok || !mt.hasModTime() {
		return 0, errors.New("sessionstore: only a file:// store can expire its sessions")
	}
	keys, err := s.b.List(ctx, s.root)
	if err != nil {
		return 0, fmt.Errorf("sessionstore: listing the sessions: %w", err)
	}
	byID := map[string][]string{}
	var ids []string
	for _, k := range keys {
		id, _, ok := strings.Cut(strings.TrimPrefix(k, s.root), "/")
		if !ok || CheckID(id) != nil {
			continue
		}
		if byID[id] == nil {
			ids = append(ids, id)
		}
		byID[id] = append(byID[id], k)
	}
	removed := 0
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		if (keep != nil && keep(id)) || !expired(mt, byID[id], before) {
			continue
		}
		if meta, err := s.Head(ctx, id); err == nil && meta.Owner != "" {
			if err := s.unindex(ctx, meta.Owner, id); err != nil {
				return removed, err
			}
			mt.prune(ownerPrefix(meta.Owner) + s.indexID(id) + "/")
		}
		for _, k := range byID[id] {
			if err := s.b.Delete(ctx, k); err != nil {
				return removed, fmt.Errorf("sessionstore: expiring %s: %w", id, err)
			}
		}
		mt.prune(s.prefix(id))
		removed++
	}
	return removed, nil
}

// expired reports whether every one of keys was written before before.
func expired(mt modTimer, keys []string, before time.Time) bool {
	for _, k := range keys {
		t, err := mt.modTime(k)
		if err != nil || !t.Before(before) {
			return false // gone meanwhile (written anew?), or new: leave it
		}
	}
	return true
}

// modTimer is a Bucket that knows when its objects were written, and
// removes the folder of a prefix it emptied (a directory's).
type modTimer interface {
	hasModTime() bool
	modTime(key string) (time.Time, error)
	prune(prefix string)
}

func (b *fileBucket) hasModTime() bool { return true }

func (b *fileBucket) modTime(key string) (time.Time, error) {
	path, err := b.path(key)
	if err != nil {
		return time.Time{}, err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}

// prune removes the folder of prefix if it is empty: a Create into it
// makes it again (Create).
func (b *fileBucket) prune(prefix string) {
	if prefix = strings.TrimSuffix(prefix, "/"); prefix != "" {
		os.Remove(filepath.Join(b.dir, filepath.FromSlash(prefix)))
	}
}

func (p *prefixed) hasModTime() bool {
	mt, ok := p.b.(modTimer)
	return ok && mt.hasModTime()
}

func (p *prefixed) modTime(key string) (time.Time, error) {
	return p.b.(modTimer).modTime(p.prefix + key)
}

func (p *prefixed) prune(prefix string) { p.b.(modTimer).prune(p.prefix + prefix) }
