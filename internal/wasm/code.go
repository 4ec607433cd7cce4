package wasm

import (
	"errors"
	"fmt"
)

// instrumentCode inserts check at the start of every loop body of every
// function, renumbers the functions that calls and ref.func name, and adds
// the encoded bodies extra at the end.
func instrumentCode(payload, check []byte, shift func(uint64) uint64, extra [][]byte) ([]byte, error) {
	count, i, err := uleb(payload, 0)
	if err != nil {
		return nil, err
	}
	size := len(payload) + len(payload)/20
	for _, e := range extra {
		size += len(e)
	}
	out := appendULEB(make([]byte, 0, size), count+uint64(len(extra)))
	var body []byte
	for k := uint64(0); k < count; k++ {
		size, n, err := uleb(payload, i)
		if err != nil {
			return nil, err
		}
		i += n
		if i+int(size) > len(payload) {
			return nil, fmt.Errorf("function %d runs past the code section", k)
		}
		if body, err = instrumentBody(body[:0], payload[i:i+int(size)], check, shift); err != nil {
			return nil, fmt.Errorf("function %d: %w", k, err)
		}
		i += int(size)
		out = appendULEB(out, uint64(len(body)))
		out = append(out, body...)
	}
	for _, e := range extra {
		out = append(out, e...)
	}
	return out, nil
}

func instrumentBody(out, fn, check []byte, shift func(uint64) uint64) ([]byte, error) {
	i, err := skipLocals(fn)
	if err != nil {
		return nil, err
	}
	copied := 0 // fn[:copied] is in out already; unchanged runs are copied in one go
	for i < len(fn) {
		op := fn[i]
		i++
		if n := immediateLEBs[op]; n >= 0 { // the common instructions, quickly
			for ; n > 0; n-- {
				for i < len(fn) && fn[i]&0x80 != 0 {
					i++
				}
				i++
			}
			if i > len(fn) {
				return nil, errors.New("truncated instruction")
			}
			continue
		}
		skip := func() error { // one LEB128 immediate
			_, n, err := uleb(fn, i)
			i += n
			return err
		}
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if: blocktype
			if i >= len(fn) {
				return nil, errors.New("truncated blocktype")
			}
			if b := fn[i]; b == 0x40 || (b >= 0x6f && b <= 0x7f) {
				i++
			} else if _, n, err := sleb64(fn, i); err != nil {
				return nil, err
			} else {
				i += n
			}
			if op == 0x03 {
				out = append(out, fn[copied:i]...)
				out = append(out, check...)
				copied = i
			}
			continue
		case op == 0x10, op == 0xd2: // call, ref.func: a function index
			var idx uint64
			var n int
			if idx, n, err = uleb(fn, i); err != nil {
				break
			}
			if moved := shift(idx); moved != idx {
				out = append(out, fn[copied:i]...)
				out = appendULEB(out, moved)
				copied = i + n
			}
			i += n
			continue
		case op == 0x0e: // br_table: vector of labels, then the default
			var targets uint64
			var n int
			if targets, n, err = uleb(fn, i); err == nil {
				i += n
				for t := uint64(0); t <= targets && err == nil; t++ {
					err = skip()
				}
			}
		case op == 0x1c: // select with types
			var types uint64
			var n int
			if types, n, err = uleb(fn, i); err == nil {
				i += n + int(types)
			}
		case op == 0x43:
			i += 4
		case op == 0x44:
			i += 8
		case op == 0xd0: // ref.null reftype
			i++
		case op == 0xfc:
			i, err = skipPrefixed(fn, i)
		default:
			return nil, fmt.Errorf("unknown instruction 0x%02x", op)
		}
		if err != nil {
			return nil, err
		}
		if i > len(fn) {
			return nil, errors.New("truncated instruction")
		}
	}
	return append(out, fn[copied:]...), nil
}

// skipLocals returns where the instructions of function body fn start,
// after its locals: a vector of (count, valtype).
func skipLocals(fn []byte) (int, error) {
	groups, i, err := uleb(fn, 0)
	if err != nil {
		return 0, err
	}
	for g := uint64(0); g < groups; g++ {
		_, n, err := uleb(fn, i)
		if err != nil {
			return 0, err
		}
		i += n + 1
	}
	if i > len(fn) {
		return 0, errors.New("truncated locals")
	}
	return i, nil
}

// skipPrefixed returns where the instruction after the 0xfc prefix at
// fn[i-1] ends: its sub-opcode and immediates.
func skipPrefixed(fn []byte, i int) (int, error) {
	skip := func() error { // one LEB128 immediate
		_, n, err := uleb(fn, i)
		i += n
		return err
	}
	sub, n, err := uleb(fn, i)
	if err != nil {
		return i, err
	}
	i += n
	switch {
	case sub <= 7: // saturating truncation
	case sub == 8: // memory.init data, memory
		if err = skip(); err == nil {
			err = skip()
		}
	case sub == 9, sub == 11, sub == 13, sub >= 15 && sub <= 17: // data.drop, memory.fill, elem.drop, table.grow/size/fill
		err = skip()
	case sub == 10, sub == 12, sub == 14: // memory.copy, table.init, table.copy
		if err = skip(); err == nil {
			err = skip()
		}
	default:
		return i, fmt.Errorf("unknown instruction 0xfc %d", sub)
	}
	return i, err
}

// immediateLEBs gives, for each opcode whose immediates are only LEB128
// numbers, how many it has; -1 for every other opcode (instrumentBody's switch
// decodes those, or refuses them).
var immediateLEBs = func() (t [256]int8) {
	for op := range t {
		switch {
		case op == 0x00, op == 0x01, op == 0x05, op == 0x0b, op == 0x0f, op == 0x1a, op == 0x1b,
			op >= 0x45 && op <= 0xc4, op == 0xd1:
			t[op] = 0
		case op == 0x0c, op == 0x0d, op >= 0x20 && op <= 0x26, op == 0x3f, op == 0x40, op == 0x41, op == 0x42:
			t[op] = 1
		case op == 0x11, op >= 0x28 && op <= 0x3e:
			t[op] = 2
		default:
			t[op] = -1
		}
	}
	return t
}()
