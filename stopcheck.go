package spine

import (
	"errors"
	"fmt"
)

// stopGlobal is the name under which an instrumented Guest exports its stop flag.
const stopGlobal = "spine_stop"

// addStopChecks returns the module with a cheap way to stop it: a new mutable
// i32 global, exported as spine_stop, that every loop of every function tests
// on each iteration (global.get; if; unreachable; end). The Host sets it from
// another goroutine when a run's context ends, and the Guest traps at its next
// loop iteration. Infinite work needs a loop or unbounded recursion (which
// overflows the stack and traps on its own), so the flag stops every Guest.
//
// wazero's own way, WithCloseOnContextDone, calls a trampoline at every loop
// header and function entry; in CPython's interpreter loop that costs about
// 2.5 times the run time. The global costs a load and a branch.
//
// Only the instructions of WebAssembly 1.0 with sign extension, saturating
// truncation and bulk memory are understood; anything else is an error, and the
// Host falls back to WithCloseOnContextDone.
func addStopChecks(wasm []byte) ([]byte, error) {
	if len(wasm) < 8 {
		return nil, errors.New("not a WebAssembly binary")
	}
	var importedGlobals, definedGlobals uint64
	var sawGlobals, sawExports bool
	type section struct {
		id      byte
		payload []byte
	}
	var sections []section
	for i := 8; i < len(wasm); {
		id := wasm[i]
		size, n, err := uleb(wasm, i+1)
		if err != nil {
			return nil, err
		}
		start := i + 1 + n
		end := start + int(size)
		if end > len(wasm) || end < start {
			return nil, fmt.Errorf("section %d runs past the end", id)
		}
		payload := wasm[start:end]
		switch id {
		case 2:
			if importedGlobals, err = countImportedGlobals(payload); err != nil {
				return nil, err
			}
		case 6:
			sawGlobals = true
			if definedGlobals, _, err = uleb(payload, 0); err != nil {
				return nil, err
			}
		case 7:
			sawExports = true
		}
		sections = append(sections, section{id, payload})
		i = end
	}
	if !sawGlobals || !sawExports {
		return nil, errors.New("the module has no global or no export section")
	}
	flag := uint32(importedGlobals + definedGlobals)
	check := append([]byte{0x23}, appendULEB(nil, uint64(flag))...)
	check = append(check, 0x04, 0x40, 0x00, 0x0b) // if (empty) unreachable end

	out := append([]byte(nil), wasm[:8]...)
	for _, s := range sections {
		payload := s.payload
		var err error
		switch s.id {
		case 6: // one more global: (mut i32) = 0
			payload, err = appendToVector(payload, []byte{0x7f, 0x01, 0x41, 0x00, 0x0b})
		case 7: // export it
			entry := appendULEB(nil, uint64(len(stopGlobal)))
			entry = append(entry, stopGlobal...)
			entry = append(entry, 0x03)
			entry = appendULEB(entry, uint64(flag))
			payload, err = appendToVector(payload, entry)
		case 10:
			payload, err = instrumentCode(payload, check)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s.id)
		out = appendULEB(out, uint64(len(payload)))
		out = append(out, payload...)
	}
	return out, nil
}

func countImportedGlobals(payload []byte) (uint64, error) {
	count, i, err := uleb(payload, 0)
	if err != nil {
		return 0, err
	}
	var globals uint64
	for k := uint64(0); k < count; k++ {
		for name := 0; name < 2; name++ { // module and field names
			n, m, err := uleb(payload, i)
			if err != nil {
				return 0, err
			}
			i += m + int(n)
		}
		if i >= len(payload) {
			return 0, errors.New("truncated import")
		}
		kind := payload[i]
		i++
		switch kind {
		case 0: // func: type index
			_, m, err := uleb(payload, i)
			if err != nil {
				return 0, err
			}
			i += m
		case 1: // table: reftype, limits
			i++
			if i, err = skipLimits(payload, i); err != nil {
				return 0, err
			}
		case 2: // memory: limits
			if i, err = skipLimits(payload, i); err != nil {
				return 0, err
			}
		case 3: // global: valtype, mutability
			globals++
			i += 2
		default:
			return 0, fmt.Errorf("unknown import kind %d", kind)
		}
	}
	return globals, nil
}

func skipLimits(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("truncated limits")
	}
	flags := b[i]
	i++
	_, m, err := uleb(b, i)
	if err != nil {
		return 0, err
	}
	i += m
	if flags&1 != 0 {
		if _, m, err = uleb(b, i); err != nil {
			return 0, err
		}
		i += m
	}
	return i, nil
}

// appendToVector adds one encoded entry to a section that is a vector.
func appendToVector(payload, entry []byte) ([]byte, error) {
	count, n, err := uleb(payload, 0)
	if err != nil {
		return nil, err
	}
	out := appendULEB(nil, count+1)
	out = append(out, payload[n:]...)
	return append(out, entry...), nil
}

// instrumentCode inserts check at the start of every loop body of every function.
func instrumentCode(payload, check []byte) ([]byte, error) {
	count, i, err := uleb(payload, 0)
	if err != nil {
		return nil, err
	}
	out := appendULEB(make([]byte, 0, len(payload)+len(payload)/20), count)
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
		if body, err = instrumentBody(body[:0], payload[i:i+int(size)], check); err != nil {
			return nil, fmt.Errorf("function %d: %w", k, err)
		}
		i += int(size)
		out = appendULEB(out, uint64(len(body)))
		out = append(out, body...)
	}
	return out, nil
}

func instrumentBody(out, fn, check []byte) ([]byte, error) {
	// Locals: a vector of (count, valtype).
	groups, i, err := uleb(fn, 0)
	if err != nil {
		return nil, err
	}
	for g := uint64(0); g < groups; g++ {
		_, n, err := uleb(fn, i)
		if err != nil {
			return nil, err
		}
		i += n + 1
	}
	if i > len(fn) {
		return nil, errors.New("truncated locals")
	}
	out = append(out, fn[:i]...)
	for i < len(fn) {
		start := i
		op := fn[i]
		i++
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
			out = append(out, fn[start:i]...)
			if op == 0x03 {
				out = append(out, check...)
			}
			continue
		case op == 0x00, op == 0x01, op == 0x05, op == 0x0b, op == 0x0f, op == 0x1a, op == 0x1b,
			op >= 0x45 && op <= 0xc4, op == 0xd1:
			// no immediates
		case op == 0x0c, op == 0x0d, op == 0x10, op >= 0x20 && op <= 0x26, op == 0xd2:
			err = skip()
		case op == 0x0e: // br_table: vector of labels, then the default
			var targets uint64
			var n int
			if targets, n, err = uleb(fn, i); err == nil {
				i += n
				for t := uint64(0); t <= targets && err == nil; t++ {
					err = skip()
				}
			}
		case op == 0x11: // call_indirect: type, table
			if err = skip(); err == nil {
				err = skip()
			}
		case op == 0x1c: // select with types
			var types uint64
			var n int
			if types, n, err = uleb(fn, i); err == nil {
				i += n + int(types)
			}
		case op >= 0x28 && op <= 0x3e: // memarg: align, offset
			if err = skip(); err == nil {
				err = skip()
			}
		case op == 0x3f, op == 0x40: // memory index
			err = skip()
		case op == 0x41:
			_, n, e := sleb64(fn, i)
			i, err = i+n, e
		case op == 0x42:
			_, n, e := sleb64(fn, i)
			i, err = i+n, e
		case op == 0x43:
			i += 4
		case op == 0x44:
			i += 8
		case op == 0xd0: // ref.null reftype
			i++
		case op == 0xfc:
			var sub uint64
			var n int
			if sub, n, err = uleb(fn, i); err != nil {
				break
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
				return nil, fmt.Errorf("unknown instruction 0xfc %d", sub)
			}
		default:
			return nil, fmt.Errorf("unknown instruction 0x%02x", op)
		}
		if err != nil {
			return nil, err
		}
		if i > len(fn) {
			return nil, errors.New("truncated instruction")
		}
		out = append(out, fn[start:i]...)
	}
	return out, nil
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
