package spine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/spine-run/spine/internal/engine"
)

// A snapshot is a session's state as bytes (docs/sessions.md):
//
//	offset   0  snapshotMagic, 16 bytes
//	offset  16  snapshotVersion, uint32 little-endian
//	offset  20  zero, uint32
//	offset  24  SHA-256 of the Guest artifact's identity (its manifest, or its files' hashes)
//	offset  56  SHA-256 of the tool list as the Guest sees it
//	offset  88  the prepared image's key (SHA-256 of artifact, warm-up and tools)
//	offset 120  the Guest's linear memory, in bytes, uint64
//	offset 128  how many 4 KiB pages differ from the image, uint32
//	offset 132  zero, uint32
//	offset 136  zero, uint64
//	offset 144  the payload: a zstd frame holding the pages' numbers (uint32 each,
//	            ascending), a bit per page saying how it is kept (ceil(pages/8)
//	            bytes, bit i%8 of byte i/8), then each page: XOR the image's
//	            page (bit clear), or as it is (bit set)
//	end - 40    the payload's length, uint64
//	end - 32    SHA-256 of everything before it, 32 bytes
//
// The payload's length and the checksum come last so that a snapshot is
// written as it is made and read as it is restored, a page at a time: the
// memory either takes beyond the Guest's own is snapshotStreamMemory, not a
// multiple of the session's size.
//
// The checksum catches a truncated or damaged blob; it does not authenticate
// one. A snapshot needs no authentication for the Host's sake: a crafted one
// can only give a Guest crafted memory, and the Host treats every Guest as
// hostile already. Whoever holds a snapshot holds everything its session's
// programs saw, tool results included: keep it as secret as those.
const (
	snapshotMagic       = "spine snapshot\x00\x00"
	snapshotVersion     = 2
	snapshotHeaderSize  = 144
	snapshotTrailerSize = 8 + sha256.Size
)

// The header's fields, by their offsets above.
const (
	headVersion  = 16  // uint32
	headZero1    = 20  // uint32, zero
	headArtifact = 24  // 32 bytes, to headTools
	headTools    = 56  // 32 bytes, to headImage
	headImage    = 88  // 32 bytes, to headMemory
	headMemory   = 120 // uint64
	headPages    = 128 // uint32
	headZero2    = 132 // uint32, zero
	headZero3    = 136 // uint64, zero
)

var (
	// ErrSnapshot is a snapshot that is not one: truncated, damaged, of
	// another format version, or describing a state no Guest can have.
	ErrSnapshot = errors.New("spine: bad snapshot")

	// ErrSnapshotMismatch is a sound snapshot of another Runner's kind: made
	// with another Guest artifact, another tool list, or another Spine whose
	// prepared image differs. Restore needs the same artifact and tools.
	ErrSnapshotMismatch = errors.New("spine: snapshot of another Guest or tool list")
)

// snapshotIdentity is what a snapshot must share with the Runner that
// restores it.
type snapshotIdentity struct {
	artifact, tools, image [32]byte
}

func newSnapshotIdentity(artifact, tools []byte, imageKey string) snapshotIdentity {
	id := snapshotIdentity{artifact: sha256.Sum256(artifact), tools: sha256.Sum256(tools)}
	if key, err := hex.DecodeString(imageKey); err == nil {
		copy(id.image[:], key)
	}
	return id
}

// A snapshot is written as it is made and read as it is restored, between
// the Guest's pages and the writer or reader, so that taking or waking a
// session of any size costs the Host a bounded amount of memory beyond the
// Guest's own: snapshotStreamMemory. It is the sum of
//
//   - the page index: 4 bytes and a bit per page that differs from the image,
//     at most 264 KiB for a session of 256 MiB (SessionOptions.MemoryLimit's
//     most);
//   - zstd's state: a window of snapshotWindow bytes and its tables, about
//     3 MiB to write and 2 MiB to read;
//   - a chunk of snapshotChunk bytes, and one page.
//
// TestSnapshotStreamMemory measures a snapshot and a wake of a 200 MB session
// against it.
const (
	snapshotWindow       = 1 << 20
	snapshotChunk        = 64 << 10
	snapshotStreamMemory = 4 << 20
)

// SnapshotStreamMemory is the most memory SnapshotTo and RestoreFrom take
// beyond the Guest's own, whatever the session's size (snapshotStreamMemory).
const SnapshotStreamMemory = snapshotStreamMemory

// ErrSnapshotTooLarge is a snapshot over the size limit it was taken for
// (SessionOptions.MaxSnapshot, or the caller's): nothing of it is kept.
var ErrSnapshotTooLarge = errors.New("spine: snapshot over its size limit")

// Encoders and decoders are kept for the next snapshot: each holds its
// window and tables, which are most of what a snapshot costs to make.
var (
	snapshotEncoders sync.Pool // *zstd.Encoder
	snapshotDecoders sync.Pool // *zstd.Decoder
)

// snapshotWriter passes bytes to w, counting and hashing them, and refuses
// to pass limit (when positive).
type snapshotWriter struct {
	w     io.Writer
	h     hash.Hash
	n     int64
	limit int64
	err   error // the first error, which every later Write returns
}

func (sw *snapshotWriter) Write(p []byte) (int, error) {
	if sw.err != nil {
		return 0, sw.err
	}
	if sw.limit > 0 && sw.n+int64(len(p)) > sw.limit {
		sw.err = fmt.Errorf("%w: it is over %d bytes", ErrSnapshotTooLarge, sw.limit)
		return 0, sw.err
	}
	n, err := sw.w.Write(p)
	sw.h.Write(p[:n])
	sw.n += int64(n)
	if err != nil {
		sw.err = err
	}
	return n, err
}

// writeSnapshot writes the snapshot of the state st indexes (its Data
// unused: page writes page i's data into dst) to w, for a Runner of identity
// id, refusing to write more than limit bytes (0: no limit). It returns the
// bytes written. On an error, what w got is not a snapshot: the caller drops
// it.
func writeSnapshot(w io.Writer, id snapshotIdentity, st *engine.State, page func(i int, dst []byte), limit int64) (int64, error) {
	sw := &snapshotWriter{w: w, h: sha256.New(), limit: limit}
	var head [snapshotHeaderSize]byte
	copy(head[:], snapshotMagic)
	binary.LittleEndian.PutUint32(head[headVersion:], snapshotVersion)
	copy(head[headArtifact:], id.artifact[:])
	copy(head[headTools:], id.tools[:])
	copy(head[headImage:], id.image[:])
	binary.LittleEndian.PutUint64(head[headMemory:], st.Memory)
	binary.LittleEndian.PutUint32(head[headPages:], uint32(len(st.Pages)))
	sw.Write(head[:])
	start := sw.n
	enc, _ := snapshotEncoders.Get().(*zstd.Encoder)
	if enc == nil {
		enc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(snapshotWindow), zstd.WithLowerEncoderMem(true))
	}
	defer snapshotEncoders.Put(enc)
	enc.Reset(sw)
	buf := make([]byte, snapshotChunk)
	for i := 0; i < len(st.Pages) && sw.err == nil; {
		k := 0
		for ; i < len(st.Pages) && k+4 <= len(buf); i++ {
			binary.LittleEndian.PutUint32(buf[k:], st.Pages[i])
			k += 4
		}
		enc.Write(buf[:k])
	}
	enc.Write(st.Raw)
	for i := 0; i < len(st.Pages) && sw.err == nil; {
		k := 0
		for ; i < len(st.Pages) && k+engine.StatePageSize <= len(buf); i++ {
			page(i, buf[k:k+engine.StatePageSize])
			k += engine.StatePageSize
		}
		enc.Write(buf[:k])
	}
	if err := enc.Close(); err != nil && sw.err == nil {
		sw.err = err
	}
	var tail [8]byte
	binary.LittleEndian.PutUint64(tail[:], uint64(sw.n-start))
	sw.Write(tail[:])
	sw.Write(sw.h.Sum(nil))
	return sw.n, sw.err
}

// payloadReader reads a snapshot's payload: the bytes past the header up to
// the trailer, which it holds back, hashing what it passes.
type payloadReader struct {
	br *bufio.Reader
	h  hash.Hash
	n  int64 // payload bytes passed
}

func (p *payloadReader) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	ahead, err := p.br.Peek(min(len(b)+snapshotTrailerSize, p.br.Size()))
	if len(ahead) <= snapshotTrailerSize {
		if err == nil {
			err = io.ErrNoProgress
		}
		return 0, err
	}
	k := copy(b, ahead[:len(ahead)-snapshotTrailerSize])
	p.h.Write(b[:k])
	p.br.Discard(k)
	p.n += int64(k)
	return k, nil
}

// snapshotStream is a snapshot being read: its index, then its pages.
type snapshotStream struct {
	st      *engine.State // the index: Memory, Pages and Raw
	src     *payloadReader
	dec     *zstd.Decoder
	scratch [engine.StatePageSize]byte
}

// snapshotBad is ErrSnapshot, saying why.
func snapshotBad(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSnapshot}, args...)...)
}

// readFailed is the error of a read of a snapshot's bytes: one of the
// reader's own (a request body cut short, say) is passed on as it is,
// within ErrSnapshot.
func readFailed(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrNoProgress) {
		return snapshotBad("it ends inside its %s (truncated)", what)
	}
	return fmt.Errorf("%w: reading its %s: %w", ErrSnapshot, what, err)
}

// openSnapshot reads a snapshot's header and page index from rd, for a
// Runner of identity id whose sessions have at most maxMemory bytes, and
// returns the stream, positioned at its first page; close it. Every error
// matches ErrSnapshot or ErrSnapshotMismatch; nothing is allocated past what
// the header declares, and that is bounded by maxMemory.
func openSnapshot(rd io.Reader, id snapshotIdentity, maxMemory uint64) (*snapshotStream, error) {
	br := bufio.NewReaderSize(rd, snapshotChunk)
	var head [snapshotHeaderSize]byte
	if n, err := io.ReadFull(br, head[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, snapshotBad("%d bytes is too short for a snapshot", n)
		}
		return nil, readFailed("header", err)
	}
	if string(head[:len(snapshotMagic)]) != snapshotMagic {
		return nil, snapshotBad("not a Spine snapshot")
	}
	if v := binary.LittleEndian.Uint32(head[headVersion:]); v != snapshotVersion {
		return nil, snapshotBad("format version %d; this Spine reads version %d", v, snapshotVersion)
	}
	if binary.LittleEndian.Uint32(head[headZero1:]) != 0 || binary.LittleEndian.Uint32(head[headZero2:]) != 0 || binary.LittleEndian.Uint64(head[headZero3:]) != 0 {
		return nil, snapshotBad("reserved header fields are not zero")
	}
	h := sha256.New()
	h.Write(head[:])
	src := &payloadReader{br: br, h: h}
	if err := mismatch(head[:], id); err != nil {
		// A damaged snapshot is told as damaged, not as another's: the
		// rest is read through for its checksum, a chunk at a time.
		if bad := src.checkTrailer(); bad != nil {
			return nil, bad
		}
		return nil, err
	}
	st := &engine.State{Memory: binary.LittleEndian.Uint64(head[headMemory:])}
	pages := uint64(binary.LittleEndian.Uint32(head[headPages:]))
	switch {
	case st.Memory > maxMemory:
		return nil, snapshotBad("its session has %d bytes of memory, over this Runner's session limit of %d", st.Memory, maxMemory)
	case st.Memory%engine.WasmPageSize != 0:
		return nil, snapshotBad("memory of %d bytes is not a whole number of wasm pages", st.Memory)
	case pages > st.Memory/engine.StatePageSize:
		return nil, snapshotBad("%d pages in %d bytes of memory", pages, st.Memory)
	}
	s := &snapshotStream{st: st, src: src}
	s.dec, _ = snapshotDecoders.Get().(*zstd.Decoder)
	if s.dec == nil {
		s.dec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(snapshotWindow), zstd.WithDecoderMaxMemory(maxMemory+maxMemory/engine.StatePageSize*5))
	}
	if err := s.dec.Reset(s.src); err != nil {
		s.close()
		return nil, readFailed("payload", err)
	}
	st.Pages = make([]uint32, pages)
	buf := s.scratch[:]
	for i := 0; i < len(st.Pages); {
		k := min(len(buf), 4*(len(st.Pages)-i))
		if _, err := io.ReadFull(s.dec, buf[:k]); err != nil {
			s.close()
			return nil, readFailed("page numbers", err)
		}
		for j := 0; j < k; j += 4 {
			st.Pages[i] = binary.LittleEndian.Uint32(buf[j:])
			i++
		}
	}
	st.Raw = make([]byte, (pages+7)/8)
	if _, err := io.ReadFull(s.dec, st.Raw); err != nil {
		s.close()
		return nil, readFailed("page kinds", err)
	}
	return s, nil
}

// openRestore is openSnapshot for a Guest of e with at most memory bytes,
// under identity id, with the index checked against e.
func openRestore(rd io.Reader, id snapshotIdentity, e *engine.Engine, memory uint64) (*snapshotStream, error) {
	stream, err := openSnapshot(rd, id, memory)
	if err != nil {
		return nil, err
	}
	if err := e.CheckIndex(stream.st, memory); err != nil {
		stream.close()
		return nil, fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	return stream, nil
}

// restore makes a Guest of e (of at most memory bytes) of the state stream
// holds, reading its pages into the Guest's memory; a snapshot found damaged
// at its end leaves no Guest.
func (stream *snapshotStream) restore(ctx context.Context, e *engine.Engine, memory uint64) (*engine.Instance, error) {
	inst, err := e.RestoreFunc(ctx, stream.st, memory, func(_ int, raw bool, page []byte) error {
		return stream.page(raw, page)
	})
	if err != nil {
		return nil, err
	}
	if err := stream.finish(); err != nil {
		inst.Close()
		return nil, err
	}
	return inst, nil
}

// page reads the next page's data into page, the image's page: the page
// itself (raw), or its XOR with the image's.
func (s *snapshotStream) page(raw bool, page []byte) error {
	if raw {
		if _, err := io.ReadFull(s.dec, page); err != nil {
			return readFailed("pages", err)
		}
		return nil
	}
	if _, err := io.ReadFull(s.dec, s.scratch[:]); err != nil {
		return readFailed("pages", err)
	}
	subtle.XORBytes(page, page, s.scratch[:])
	return nil
}

// finish checks that the payload held nothing past the pages and that the
// trailer matches it: its length and the checksum of everything before.
func (s *snapshotStream) finish() error {
	var one [1]byte
	if n, err := s.dec.Read(one[:]); n != 0 || !errors.Is(err, io.EOF) {
		if n == 0 && err != nil && !errors.Is(err, io.EOF) {
			return readFailed("payload", err)
		}
		return snapshotBad("its payload holds more than its pages")
	}
	return s.src.checkTrailer()
}

// checkTrailer reads the rest of the payload and checks the trailer
// against it: its length and the checksum of everything before.
func (p *payloadReader) checkTrailer() error {
	if _, err := io.Copy(io.Discard, p); err != nil && !errors.Is(err, io.EOF) {
		return readFailed("payload", err)
	}
	tail, _ := p.br.Peek(snapshotTrailerSize + 1)
	if len(tail) != snapshotTrailerSize {
		return snapshotBad("it ends inside its trailer (truncated)")
	}
	if n := binary.LittleEndian.Uint64(tail); n != uint64(p.n) {
		return snapshotBad("its payload is %d bytes, but its trailer says %d (truncated or extended)", p.n, n)
	}
	p.h.Write(tail[:8])
	if !bytes.Equal(p.h.Sum(nil), tail[8:]) {
		return snapshotBad("checksum mismatch (damaged)")
	}
	return nil
}

// mismatch is why a snapshot of header head is not of identity id, nil
// when it is.
func mismatch(head []byte, id snapshotIdentity) error {
	switch {
	case !bytes.Equal(head[headArtifact:headTools], id.artifact[:]):
		return fmt.Errorf("%w: it was made with another Guest artifact (the default Guest, the data Guest or another build)", ErrSnapshotMismatch)
	case !bytes.Equal(head[headTools:headImage], id.tools[:]):
		return fmt.Errorf("%w: it was made with another tool list", ErrSnapshotMismatch)
	case !bytes.Equal(head[headImage:headMemory], id.image[:]):
		return fmt.Errorf("%w: it was made from another prepared image (another version of Spine)", ErrSnapshotMismatch)
	}
	return nil
}

// close gives the decoder back.
func (s *snapshotStream) close() {
	if s.dec != nil {
		snapshotDecoders.Put(s.dec)
		s.dec = nil
	}
}

// chunks is bytes kept in chunks of snapshotChunk, written and read without
// a copy of the whole: a snapshot kept in memory.
type chunks struct {
	list [][]byte
	n    int64
}

func (c *chunks) Write(p []byte) (int, error) {
	done := len(p)
	for len(p) > 0 {
		if len(c.list) == 0 || len(c.list[len(c.list)-1]) == snapshotChunk {
			c.list = append(c.list, make([]byte, 0, snapshotChunk))
		}
		last := &c.list[len(c.list)-1]
		k := min(len(p), snapshotChunk-len(*last))
		*last = append(*last, p[:k]...)
		p = p[k:]
	}
	c.n += int64(done)
	return done, nil
}

// reader returns a reader of the bytes.
func (c *chunks) reader() io.Reader {
	rs := make([]io.Reader, len(c.list))
	for i, b := range c.list {
		rs[i] = bytes.NewReader(b)
	}
	return io.MultiReader(rs...)
}

// bytes returns the bytes in one slice of their own.
func (c *chunks) bytes() []byte {
	out := make([]byte, 0, c.n)
	for _, b := range c.list {
		out = append(out, b...)
	}
	return out
}
