package spine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spine-run/spine/internal/engine"
)

// White-box tests of the snapshot format (snapshot.go): blobs of another
// Guest or tool list, hostile pages, and its decoder fuzzed. Damaged
// snapshots, which the API alone makes, are in snapshot_damage_test.go.

func TestSnapshotMismatch(t *testing.T) {
	ctx := context.Background()
	r := newRunner(t, testManifest(), nil)
	s := newSession(t, r)
	step(t, s, "x = 1")
	blob, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := testManifest()
	delete(m, "fail")
	fewer := newRunner(t, m, &Options{PoolSize: -1})
	if _, err := fewer.Restore(ctx, blob); !errors.Is(err, ErrSnapshotMismatch) || !strings.Contains(err.Error(), "tool list") {
		t.Fatalf("another tool list: %v", err)
	}
	// Another artifact: the same state under another artifact's identity.
	st, err := decodeSnapshot(r.identity, blob, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	id := r.identity
	id.artifact[0] ^= 1
	if _, err := r.Restore(ctx, encodeSnapshot(id, st)); !errors.Is(err, ErrSnapshotMismatch) || !strings.Contains(err.Error(), "artifact") {
		t.Fatalf("another artifact: %v", err)
	}
	id = r.identity
	id.image[0] ^= 1
	if _, err := r.Restore(ctx, encodeSnapshot(id, st)); !errors.Is(err, ErrSnapshotMismatch) || !strings.Contains(err.Error(), "image") {
		t.Fatalf("another image: %v", err)
	}
}

// TestSnapshotHostileState restores well-formed snapshots whose pages are
// garbage: the Guest may fail, never the Host, and the failure is the
// session's alone.
func TestSnapshotHostileState(t *testing.T) {
	ctx := context.Background()
	r := newRunner(t, testManifest(), nil)
	inst, err := r.engine.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	size := int(inst.Memory().Size()) // the image's: a Guest starts with its memory
	r.engine.Release(inst, true)
	for _, tc := range []struct {
		name  string
		pages []uint32
	}{
		{"the first pages", []uint32{0, 1, 2, 3}},
		{"the middle", []uint32{uint32(size / 2 / engine.StatePageSize)}},
		{"the last page", []uint32{uint32(size/engine.StatePageSize - 1)}},
		{"every 16th page", func() (p []uint32) {
			for i := 0; i < size/engine.StatePageSize; i += 16 {
				p = append(p, uint32(i))
			}
			return p
		}()},
	} {
		st := &engine.State{Memory: uint64(size), Pages: tc.pages, Raw: make([]byte, (len(tc.pages)+7)/8)}
		for i := range tc.pages {
			page := make([]byte, engine.StatePageSize)
			for j := range page {
				page[j] = byte(j*7 + i)
			}
			st.Data = append(st.Data, page...)
		}
		s, err := r.Restore(ctx, encodeSnapshot(r.identity, st))
		if err != nil {
			t.Logf("%s: restore: %v", tc.name, err)
			continue
		}
		out, err := s.Run(ctx, Request{Source: "result = 1 + 1", Timeout: time.Minute})
		t.Logf("%s: %v %v", tc.name, err, out)
		s.Close(ctx)
	}
	if out, err := r.Run(ctx, Request{Source: "1 + 1"}); err != nil || string(out.Value) != "2" {
		t.Fatalf("a pooled run after: %v %+v", err, out)
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	id := newSnapshotIdentity([]byte("artifact"), []byte("tools"), strings.Repeat("ab", 32))
	good := encodeSnapshot(id, &engine.State{Memory: 1 << 20, Pages: []uint32{3, 9}, Raw: []byte{2}, Data: make([]byte, 2*engine.StatePageSize)})
	f.Add(good)
	f.Add(good[:snapshotHeaderSize])
	f.Add([]byte(snapshotMagic))
	f.Fuzz(func(t *testing.T, blob []byte) {
		// Each input also goes in with its checksum made right, so that the
		// fuzzer reaches the header's checks, the payload and the pages.
		if len(blob) >= snapshotHeaderSize {
			body := blob[:len(blob)-min(len(blob)-snapshotHeaderSize, snapshotTrailerSize)]
			fixed := binary.LittleEndian.AppendUint64(append([]byte(nil), body...), uint64(len(body)-snapshotHeaderSize))
			sum := sha256.Sum256(fixed)
			decodeChecked(t, id, append(fixed, sum[:]...))
		}
		decodeChecked(t, id, blob)
	})
}

func decodeChecked(t *testing.T, id snapshotIdentity, blob []byte) {
	{
		st, err := decodeSnapshot(id, blob, 64<<20)
		if err != nil {
			if !errors.Is(err, ErrSnapshot) && !errors.Is(err, ErrSnapshotMismatch) {
				t.Fatalf("error of no kind: %v", err)
			}
			return
		}
		if uint64(len(st.Data)) != uint64(len(st.Pages))*engine.StatePageSize || st.Memory > 64<<20 || len(st.Raw) != (len(st.Pages)+7)/8 {
			t.Fatalf("decoded an impossible state: %d pages, %d bytes, memory %d", len(st.Pages), len(st.Data), st.Memory)
		}
	}
}

// encodeSnapshot returns st (with its Data) as a snapshot blob for a Runner
// of identity id.
func encodeSnapshot(id snapshotIdentity, st *engine.State) []byte {
	var b bytes.Buffer
	writeSnapshot(&b, id, st, func(i int, dst []byte) {
		copy(dst, st.Data[i*engine.StatePageSize:])
	}, 0)
	return b.Bytes()
}

// decodeSnapshot reads blob into a State with its Data; every error matches
// ErrSnapshot or ErrSnapshotMismatch.
func decodeSnapshot(id snapshotIdentity, blob []byte, maxMemory uint64) (*engine.State, error) {
	s, err := openSnapshot(bytes.NewReader(blob), id, maxMemory)
	if err != nil {
		return nil, err
	}
	defer s.close()
	st := s.st
	st.Data = make([]byte, len(st.Pages)*engine.StatePageSize)
	for i := range st.Pages {
		if err := s.page(true, st.Data[i*engine.StatePageSize:(i+1)*engine.StatePageSize]); err != nil {
			return nil, err
		}
	}
	if err := s.finish(); err != nil {
		return nil, err
	}
	return st, nil
}
