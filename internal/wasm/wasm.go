// Package wasm reads and rewrites the Guest's WebAssembly module before the
// Host compiles it: the data segments split off (data.go), fuel and the
// descriptor checks added (instrument.go). Only what LLVM writes for the
// Guest is understood; anything else is an error.
package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The section ids this package reads or writes.
const (
	sectionCustom    = 0
	sectionType      = 1
	sectionImport    = 2
	sectionFunction  = 3
	sectionGlobal    = 6
	sectionExport    = 7
	sectionStart     = 8
	sectionElement   = 9
	sectionCode      = 10
	sectionData      = 11
	sectionDataCount = 12
)

// section is one section of a module: its id and its payload.
type section struct {
	id      byte
	payload []byte
}

// sections splits a WebAssembly 1.0 module into its sections, in order: the
// one place that reads section headers.
func sections(module []byte) ([]section, error) {
	if len(module) < 8 || string(module[:4]) != "\x00asm" || binary.LittleEndian.Uint32(module[4:8]) != 1 {
		return nil, errors.New("not a WebAssembly 1.0 binary")
	}
	var secs []section
	for i := 8; i < len(module); {
		id := module[i]
		size, n, err := uleb(module, i+1)
		if err != nil {
			return nil, err
		}
		start := i + 1 + n
		end := start + int(size)
		if end > len(module) || end < start {
			return nil, fmt.Errorf("section %d runs past the end", id)
		}
		secs = append(secs, section{id, module[start:end]})
		i = end
	}
	return secs, nil
}

// assemble is the module made of secs.
func assemble(secs []section) []byte {
	size := 8
	for _, s := range secs {
		size += 1 + 5 + len(s.payload)
	}
	out := append(make([]byte, 0, size), "\x00asm\x01\x00\x00\x00"...)
	for _, s := range secs {
		out = append(out, s.id)
		out = appendULEB(out, uint64(len(s.payload)))
		out = append(out, s.payload...)
	}
	return out
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
