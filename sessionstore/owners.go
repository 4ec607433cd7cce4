package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
)

// The owner index (docs/rationale.md "A token's bytes in the store"): an
// owner's total in the store is known from one listing, not by reading
// every session. A write with an owner's limit (PutOwned) records the
// snapshot's size in an empty object's key:
//
//	owners/<owner>/<id>/<generation, 20 digits>-<size in bytes>
//
// Per session the entry of the highest generation counts; older ones are
// removed by the write after them, and all of a session's by Delete. Only
// writes with a limit keep the index, so only owners with a limit pay for
// it: one listing of the owner's entries before the write, one empty
// object after it, and the removal of the session's older entry.

// OwnerFullError is a PutOwned refused because the snapshot does not fit
// in what its owner's other sessions leave of the owner's limit. It is
// ErrTooLarge (errors.Is), and like it keeps nothing of the snapshot.
type OwnerFullError struct {
	Limit  int64 // the owner's limit, in bytes
	Others int64 // the bytes its other sessions keep in the store
}

func (e *OwnerFullError) Error() string {
	return fmt.Sprintf("its owner's sessions may keep %d bytes in the store and the others keep %d, so it must fit in %d", e.Limit, e.Others, max(0, e.Limit-e.Others))
}

// Is makes an OwnerFullError ErrTooLarge.
func (e *OwnerFullError) Is(target error) bool { return target == ErrTooLarge }

func ownerPrefix(owner string) string { return "owners/" + owner + "/" }

// runsIndexTag heads the id of a run (the Store of Runs) in the owner
// index, apart from a session of the same id: any id may name a session
// (one restored under it), and the entries of the one must not count as,
// or be removed with, the other's. No id has a '.'.
const runsIndexTag = "runs."

// indexID is id's name in the owner index.
func (s *store) indexID(id string) string {
	if s.root == runsRoot {
		return runsIndexTag + id
	}
	return id
}

// entry is one key of the owner index.
type entry struct {
	key  string
	id   string
	gen  uint64
	size int64
}

func entryKey(owner, id string, gen uint64, size int64) string {
	return fmt.Sprintf("%s%s/%0*d-%d", ownerPrefix(owner), id, genDigits, gen, size)
}

// parseEntry reads an index key under owner's prefix; ok is false for
// anything else found there.
func parseEntry(owner, key string) (e entry, ok bool) {
	rest, mine := strings.CutPrefix(key, ownerPrefix(owner))
	id, rest, found := strings.Cut(rest, "/")
	gen, size, dash := strings.Cut(rest, "-")
	if !mine || !found || !dash || CheckID(strings.TrimPrefix(id, runsIndexTag)) != nil {
		return entry{}, false
	}
	g, okGen := parseGen(gen)
	n, err := strconv.ParseInt(size, 10, 64)
	if !okGen || err != nil || n < 0 || strconv.FormatInt(n, 10) != size {
		return entry{}, false
	}
	return entry{key: key, id: id, gen: g, size: n}, true
}

// index lists the entries under prefix, which is owner's or one of its
// sessions'.
func (s *store) index(ctx context.Context, owner, prefix string) ([]entry, error) {
	keys, err := s.b.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("sessionstore: listing the sessions of an owner: %w", err)
	}
	var out []entry
	for _, k := range keys {
		if e, ok := parseEntry(owner, k); ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// newestByID keeps, of each session's entries, the one of the highest
// generation.
func newestByID(entries []entry) map[string]entry {
	out := make(map[string]entry, len(entries))
	for _, e := range entries {
		if old, ok := out[e.id]; !ok || e.gen > old.gen {
			out[e.id] = e
		}
	}
	return out
}

func (s *store) OwnerBytes(ctx context.Context, owner string) (int, int64, error) {
	if err := CheckID(owner); err != nil {
		return 0, 0, err
	}
	entries, err := s.index(ctx, owner, ownerPrefix(owner))
	if err != nil {
		return 0, 0, err
	}
	var total int64
	newest := newestByID(entries)
	for _, e := range newest {
		total += e.size
	}
	return len(newest), total, nil
}

func (s *store) PutOwned(ctx context.Context, id string, meta Meta, max, ownerMax int64, write func(io.Writer) error) error {
	if ownerMax <= 0 || meta.Deleted {
		return s.Put(ctx, id, meta, max, write)
	}
	if err := CheckID(id); err != nil {
		return err
	}
	if err := CheckID(meta.Owner); err != nil {
		return fmt.Errorf("sessionstore: a limit of an owner's bytes needs an owner: %w", err)
	}
	entries, err := s.index(ctx, meta.Owner, ownerPrefix(meta.Owner))
	if err != nil {
		return err
	}
	var others int64
	indexed := s.indexID(id)
	for _, e := range newestByID(entries) {
		if e.id != indexed {
			others += e.size
		}
	}
	room := min(max, ownerMax-others)
	var made string
	err = s.put(ctx, id, meta, room, write, func(size int64) error {
		k := entryKey(meta.Owner, indexed, meta.Generation, size)
		// An entry of this generation from a write that was cut is this
		// one's: the generation's create-only write was this writer's.
		err := s.b.Create(ctx, k, nil, func(io.Writer) error { return nil })
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("sessionstore: writing the owner index of %s: %w", id, err)
		}
		made = k
		return nil
	})
	switch {
	case err == nil:
		for _, e := range entries {
			if e.id == indexed && e.gen < meta.Generation {
				s.b.Delete(ctx, e.key) // a failure leaves an entry the newer one outranks
			}
		}
		return nil
	case errors.Is(err, ErrTooLarge) && room < max:
		return fmt.Errorf("sessionstore: generation %d of %s: %w", meta.Generation, id, &OwnerFullError{Limit: ownerMax, Others: others})
	case made != "":
		s.b.Delete(ctx, made) // the write lost, after its entry was made
	}
	return err
}

// unindex removes every entry of session id from owner's index; a session
// without an owner has none.
func (s *store) unindex(ctx context.Context, owner, id string) error {
	if CheckID(owner) != nil {
		return nil
	}
	entries, err := s.index(ctx, owner, ownerPrefix(owner)+s.indexID(id)+"/")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := s.b.Delete(ctx, e.key); err != nil {
			return fmt.Errorf("sessionstore: removing %s from the owner index: %w", id, err)
		}
	}
	return nil
}
