package spine

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

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
//	offset 136  the payload's length, uint64
//	offset 144  the payload: a zstd frame holding the pages' numbers (uint32 each,
//	            ascending), a bit per page saying how it is kept (ceil(pages/8)
//	            bytes, bit i%8 of byte i/8), then each page: XOR the image's
//	            page (bit clear), or as it is (bit set)
//	the end     SHA-256 of everything before it, 32 bytes
//
// The checksum catches a truncated or damaged blob; it does not authenticate
// one. A snapshot needs no authentication for the Host's sake: a crafted one
// can only give a Guest crafted memory, and the Host treats every Guest as
// hostile already. Whoever holds a snapshot holds everything its session's
// programs saw, tool results included: keep it as secret as those.
const (
	snapshotMagic      = "spine snapshot\x00\x00"
	snapshotVersion    = 1
	snapshotHeaderSize = 144
	snapshotSumSize    = sha256.Size
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

// The encoder and decoder are safe for concurrent EncodeAll and DecodeAll,
// GOMAXPROCS of each at once.
var (
	snapshotEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	snapshotDecoder, _ = zstd.NewReader(nil, zstd.WithDecodeAllCapLimit(true),
		zstd.WithDecoderMaxMemory(guestMaxMemory+guestMaxMemory/engine.StatePageSize*5))
)

// encodeSnapshot returns st as a snapshot blob for a Runner of identity id.
func encodeSnapshot(id snapshotIdentity, st *engine.State) []byte {
	raw := make([]byte, 4*len(st.Pages), 4*len(st.Pages)+len(st.Raw)+len(st.Data))
	for i, p := range st.Pages {
		binary.LittleEndian.PutUint32(raw[4*i:], p)
	}
	raw = append(raw, st.Raw...)
	raw = append(raw, st.Data...)
	blob := make([]byte, snapshotHeaderSize, snapshotHeaderSize+len(raw)/4+snapshotSumSize)
	copy(blob, snapshotMagic)
	binary.LittleEndian.PutUint32(blob[16:], snapshotVersion)
	copy(blob[24:], id.artifact[:])
	copy(blob[56:], id.tools[:])
	copy(blob[88:], id.image[:])
	binary.LittleEndian.PutUint64(blob[120:], st.Memory)
	binary.LittleEndian.PutUint32(blob[128:], uint32(len(st.Pages)))
	blob = snapshotEncoder.EncodeAll(raw, blob)
	binary.LittleEndian.PutUint64(blob[136:], uint64(len(blob)-snapshotHeaderSize))
	sum := sha256.Sum256(blob)
	// Exactly as long as it is: a hibernated session keeps it, and the
	// buffer EncodeAll grew may be more than twice the snapshot.
	exact := make([]byte, 0, len(blob)+len(sum))
	return append(append(exact, blob...), sum[:]...)
}

// decodeSnapshot checks blob and returns the state it holds. maxMemory is the
// most linear memory the restoring Runner gives a session: a blob claiming
// more is refused before anything is decompressed. Every error matches
// ErrSnapshot or ErrSnapshotMismatch; no blob makes it panic or allocate more
// than the state it declares, and that is bounded by maxMemory.
func decodeSnapshot(id snapshotIdentity, blob []byte, maxMemory uint64) (*engine.State, error) {
	bad := func(format string, args ...any) (*engine.State, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrSnapshot}, args...)...)
	}
	if len(blob) < snapshotHeaderSize+snapshotSumSize {
		return bad("%d bytes is too short for a snapshot", len(blob))
	}
	if string(blob[:len(snapshotMagic)]) != snapshotMagic {
		return bad("not a Spine snapshot")
	}
	if v := binary.LittleEndian.Uint32(blob[16:]); v != snapshotVersion {
		return bad("format version %d; this Spine reads version %d", v, snapshotVersion)
	}
	payload := binary.LittleEndian.Uint64(blob[136:])
	if payload != uint64(len(blob)-snapshotHeaderSize-snapshotSumSize) {
		return bad("%d bytes, but its header declares %d (truncated or extended)", len(blob), snapshotHeaderSize+payload+snapshotSumSize)
	}
	body := blob[:len(blob)-snapshotSumSize]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], blob[len(body):]) {
		return bad("checksum mismatch (damaged)")
	}
	if binary.LittleEndian.Uint32(blob[20:]) != 0 || binary.LittleEndian.Uint32(blob[132:]) != 0 {
		return bad("reserved header fields are not zero")
	}
	switch {
	case !bytes.Equal(blob[24:56], id.artifact[:]):
		return nil, fmt.Errorf("%w: it was made with another Guest artifact", ErrSnapshotMismatch)
	case !bytes.Equal(blob[56:88], id.tools[:]):
		return nil, fmt.Errorf("%w: it was made with another tool list", ErrSnapshotMismatch)
	case !bytes.Equal(blob[88:120], id.image[:]):
		return nil, fmt.Errorf("%w: it was made from another prepared image (another version of Spine)", ErrSnapshotMismatch)
	}
	st := &engine.State{Memory: binary.LittleEndian.Uint64(blob[120:])}
	pages := uint64(binary.LittleEndian.Uint32(blob[128:]))
	if st.Memory > maxMemory {
		return bad("its session has %d bytes of memory, over this Runner's session limit of %d", st.Memory, maxMemory)
	}
	if st.Memory%engine.WasmPageSize != 0 {
		return bad("memory of %d bytes is not a whole number of wasm pages", st.Memory)
	}
	if pages > st.Memory/engine.StatePageSize {
		return bad("%d pages in %d bytes of memory", pages, st.Memory)
	}
	kinds := (pages + 7) / 8
	want := pages*(4+engine.StatePageSize) + kinds
	raw, err := snapshotDecoder.DecodeAll(body[snapshotHeaderSize:], make([]byte, 0, want))
	if err != nil {
		return bad("payload: %v", err)
	}
	if uint64(len(raw)) != want {
		return bad("payload of %d bytes for %d pages", len(raw), pages)
	}
	st.Pages = make([]uint32, pages)
	for i := range st.Pages {
		st.Pages[i] = binary.LittleEndian.Uint32(raw[4*i:])
	}
	st.Raw = raw[4*pages : 4*pages+kinds]
	st.Data = raw[4*pages+kinds:]
	return st, nil
}
