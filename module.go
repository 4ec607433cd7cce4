package spine

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// dataSegment is one active data segment of the Guest: bytes written at
// offset in memory 0 when an instance starts from scratch.
type dataSegment struct {
	offset uint32
	data   []byte
}

// splitData returns the Guest module without its data segments, and the
// segments. The Host compiles only the stripped module: an instance that starts
// from scratch gets the segments written by the Host before _initialize, and an
// instance that starts from a prepared image gets the image instead — without
// wazero writing the initial data over it (which would dirty every data page,
// and spoil copy-on-write).
func splitData(wasm []byte) ([]byte, []dataSegment, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" || binary.LittleEndian.Uint32(wasm[4:8]) != 1 {
		return nil, nil, errors.New("not a WebAssembly 1.0 binary")
	}
	out := make([]byte, 0, len(wasm))
	out = append(out, wasm[:8]...)
	var segments []dataSegment
	for i := 8; i < len(wasm); {
		id := wasm[i]
		size, n, err := uleb(wasm, i+1)
		if err != nil {
			return nil, nil, err
		}
		start := i + 1 + n
		end := start + int(size)
		if end > len(wasm) || end < start {
			return nil, nil, fmt.Errorf("section %d runs past the end", id)
		}
		switch id {
		case 11: // data
			if segments, err = parseData(wasm[start:end]); err != nil {
				return nil, nil, err
			}
			out = append(out, 11, 1, 0) // a data section with no segments
		case 12: // data count
			out = append(out, 12, 1, 0)
		default:
			out = append(out, wasm[i:end]...)
		}
		i = end
	}
	return out, segments, nil
}

func parseData(section []byte) ([]dataSegment, error) {
	count, i, err := uleb(section, 0)
	if err != nil {
		return nil, err
	}
	segments := make([]dataSegment, 0, count)
	for k := uint64(0); k < count; k++ {
		flags, n, err := uleb(section, i)
		if err != nil {
			return nil, err
		}
		i += n
		if flags != 0 {
			return nil, fmt.Errorf("data segment %d: only active segments of memory 0 are supported (flags %d)", k, flags)
		}
		// The offset must be a constant: i32.const N end.
		if i >= len(section) || section[i] != 0x41 {
			return nil, fmt.Errorf("data segment %d: offset is not i32.const", k)
		}
		offset, n, err := sleb64(section, i+1)
		if err != nil || offset < -1<<31 || offset >= 1<<31 {
			return nil, fmt.Errorf("data segment %d: bad offset", k)
		}
		i += 1 + n
		if i >= len(section) || section[i] != 0x0b {
			return nil, fmt.Errorf("data segment %d: offset expression is not a single constant", k)
		}
		i++
		length, n, err := uleb(section, i)
		if err != nil {
			return nil, err
		}
		i += n
		if i+int(length) > len(section) || i+int(length) < i {
			return nil, fmt.Errorf("data segment %d runs past its section", k)
		}
		segments = append(segments, dataSegment{offset: uint32(offset), data: section[i : i+int(length)]})
		i += int(length)
	}
	return segments, nil
}

func uleb(b []byte, i int) (uint64, int, error) {
	var v uint64
	for n, shift := 0, uint(0); i+n < len(b) && shift < 64; n, shift = n+1, shift+7 {
		c := b[i+n]
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, n + 1, nil
		}
	}
	return 0, 0, errors.New("bad LEB128 number")
}

func sleb64(b []byte, i int) (int64, int, error) {
	var v int64
	for n, shift := 0, uint(0); i+n < len(b) && shift < 70; n, shift = n+1, shift+7 {
		c := b[i+n]
		v |= int64(c&0x7f) << shift
		if c < 0x80 {
			if shift+7 < 64 && c&0x40 != 0 {
				v |= -1 << (shift + 7)
			}
			return v, n + 1, nil
		}
	}
	return 0, 0, errors.New("bad LEB128 number")
}

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
