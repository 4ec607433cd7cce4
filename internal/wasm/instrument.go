package wasm

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// TickImport is the Host function an instrumented Guest calls every
// FuelPerTick loop iterations (module "spine", name "tick", () -> i32).
const TickImport = "tick"

// FuelPerTick is how many loop iterations a Guest runs between two ticks: a
// few hundred microseconds of CPython's interpreter.
const FuelPerTick = 10000

// GuardedImports are the WASI functions the Host checks before the Guest
// calls them; the check for "fd_close" is the Host function spine.fd_close,
// and so on, of the same type as the WASI function.
var GuardedImports = []string{"fd_close", "fd_renumber", "path_open"}

// ErrnoImports are the WASI functions whose failures the Host may restate:
// wazero answers EIO for any error its file systems cannot name (ENOSPC
// among them), so an instrumented Guest hands every errno these return to
// the Host function spine.errno ((i32) -> i32), whose answer the Guest sees.
var ErrnoImports = []string{"fd_write", "fd_pwrite", "path_open", "path_create_directory", "fd_filestat_set_size", "path_rename"}

// ErrnoImport is the Host function that restates an errno (ErrnoImports).
const ErrnoImport = "errno"

// Version names what SplitData and Instrument make of a module: it must
// change whenever their output for the same input changes, since the Host
// caches that output on disk under a key that includes it.
const Version = 1

// OmitTicksForMeasurement, while set, makes Instrument leave out the tick
// checks at loop headers; everything else it adds (the tick import, the fuel
// global, the guards, touch_preopen) stays, so the module differs from the
// instrumented one only by the checks. Such a Guest cannot be stopped and
// never yields to Go: it exists so that spine bench --variant-no-ticks can
// measure what the ticks cost. No Runner option reaches it; only the
// benchmark sets it, around the New of the Runner it measures.
var OmitTicksForMeasurement atomic.Bool

// TouchPreopenExport is the name of the function Instrument adds that opens
// the preopened folders' directories (see Instrument).
const TouchPreopenExport = "touch_preopen"

// Instrument returns the module changed in two ways.
//
// Ticks: a cheap, reliable way to stop it and to let Go schedule other
// goroutines: a new global, fuel, counted down at the start of every loop
// body of every function; when it reaches zero the Guest calls the Host's
// spine.tick, which answers 0 when the run's context has ended (the Guest then
// traps: unreachable) or else the next fuel. Infinite work needs a loop or
// unbounded recursion (which overflows the stack and traps on its own), so
// every Guest stops within one tick of its context ending.
//
// The call into Go matters as much as the stop: goroutines running wasm code
// cannot be preempted, so without it two Guests spinning on two Ps would starve
// every other goroutine of the process — timers included.
//
// wazero's own way, WithCloseOnContextDone, calls a trampoline at every loop
// header and function entry; in CPython's interpreter loop that costs about 2.5
// times the run time. The fuel costs a load, a store and a branch.
//
// Guards: for each of GuardedImports that the module imports from
// wasi_snapshot_preview1, a new import spine.NAME of the same type and a new
// function that calls it with the same arguments and returns its errno when
// it is not 0, else calls the WASI function. Every call and every function
// reference to the WASI function is redirected to the new function, so the
// Host sees each call before wazero acts on it.
//
// Errnos: each of ErrnoImports the module imports is wrapped the same way
// (with its guard, if it has one), and a failure it returns goes through
// spine.errno before the Guest sees it.
//
// Preopen: an exported function, touch_preopen, that calls fd_sync on
// descriptors 3 and 4, the preopened folders (the standard library's and the
// scratch tree's). wazero opens a preopen's directory lazily, on its first
// use, and keeps it open; the Host calls touch_preopen when it makes a Guest
// so that these opens are part of the Guest's own descriptors, not of its
// first run's (internal/engine/descriptors.go).
//
// The imports are added last among the imports, so every function index from
// there on moves up: calls, ref.func, exports, element segments and the start
// function are renumbered; custom sections (names) are dropped. Only the
// instructions of WebAssembly 1.0 with sign extension, saturating truncation
// and bulk memory are understood; anything else is an error, and the Host
// falls back to WithCloseOnContextDone and discards every Guest after its run.
func Instrument(module []byte) ([]byte, error) {
	out, _, err := instrument(module, !OmitTicksForMeasurement.Load())
	return out, err
}

// instrument is Instrument, with or without the tick checks; it returns the
// check it inserts at every loop header (also when ticks is false).
func instrument(module []byte, ticks bool) ([]byte, []byte, error) {
	secs, err := sections(module)
	if err != nil {
		return nil, nil, err
	}
	var imports importList
	var types []funcType
	var definedGlobals, definedFuncs uint64
	seen := map[byte]bool{}
	kept := secs[:0:0]
	for _, s := range secs {
		seen[s.id] = true
		switch s.id {
		case sectionCustom:
			continue // custom sections name functions by index: drop them
		case sectionType:
			types, err = parseTypes(s.payload)
		case sectionImport:
			imports, err = parseImports(s.payload)
		case sectionFunction:
			definedFuncs, _, err = uleb(s.payload, 0)
		case sectionGlobal:
			definedGlobals, _, err = uleb(s.payload, 0)
		}
		if err != nil {
			return nil, nil, err
		}
		kept = append(kept, s)
	}
	for _, id := range []byte{sectionType, sectionImport, sectionFunction, sectionGlobal, sectionCode} {
		if !seen[id] {
			return nil, nil, fmt.Errorf("the module has no section %d", id)
		}
	}

	// The wrapped imports: which, and the indices of what is added. The
	// guarded ones come first, in import order, then those only restated.
	type guard struct {
		name  string
		orig  uint64 // the WASI import's function index
		typ   uint64
		check bool // it has a guard: the import spine.NAME
		errno bool // its failures go through spine.errno
	}
	var guards []guard
	nChecks := 0
	fdSync := -1 // wasi_snapshot_preview1.fd_sync's function index
	for pass := 0; pass < 2; pass++ {
		for idx, imp := range imports.funcs {
			if pass == 0 && imp.module == "wasi_snapshot_preview1" && imp.name == "fd_sync" {
				fdSync = idx
			}
			check := slices.Contains(GuardedImports, imp.name)
			errno := slices.Contains(ErrnoImports, imp.name)
			if imp.module != "wasi_snapshot_preview1" || check != (pass == 0) || !check && !errno {
				continue
			}
			if imp.typ >= uint64(len(types)) {
				return nil, nil, fmt.Errorf("import %s: no type %d", imp.name, imp.typ)
			}
			if ft := types[imp.typ]; len(ft.results) != 1 || ft.results[0] != 0x7f {
				return nil, nil, fmt.Errorf("import %s does not return an errno", imp.name)
			}
			guards = append(guards, guard{imp.name, uint64(idx), imp.typ, check, errno})
			if check {
				nChecks++
			}
		}
	}
	hasErrno := slices.ContainsFunc(guards, func(g guard) bool { return g.errno })
	nImported := uint64(len(imports.funcs))
	added := 1 + uint64(nChecks) // spine.tick, then one import per check, then spine.errno
	if hasErrno {
		added++
	}
	tick := nImported                   // the tick import's function index
	guardImport := func(k int) uint64 { // the k-th guard's import
		return nImported + 1 + uint64(k)
	}
	errnoImport := nImported + 1 + uint64(nChecks)
	wrapper := func(k int) uint64 { // the k-th guard's new function
		return nImported + added + definedFuncs + uint64(k)
	}
	touch := wrapper(len(guards)) // touch_preopen, after the guards' functions
	wrapped := map[uint64]uint64{}
	for k, g := range guards {
		wrapped[g.orig] = wrapper(k)
	}
	shift := func(idx uint64) uint64 { // where a function index of the input goes
		if idx >= nImported {
			return idx + added
		}
		if w, ok := wrapped[idx]; ok {
			return w
		}
		return idx
	}

	fuel := appendULEB(nil, imports.globals+definedGlobals)
	var check []byte
	emit := func(b ...byte) { check = append(check, b...) }
	emit(0x23)
	emit(fuel...)
	emit(0x45, 0x04, 0x40) // if fuel == 0 {
	emit(0x10)
	emit(appendULEB(nil, tick)...) //   call tick
	emit(0x24)
	emit(fuel...) //   fuel = that
	emit(0x23)
	emit(fuel...)
	emit(0x45, 0x04, 0x40, 0x00, 0x0b) //   if fuel == 0 { unreachable }
	emit(0x0b)                         // }
	emit(0x23)
	emit(fuel...)
	emit(0x41, 0x01, 0x6b) // fuel - 1
	emit(0x24)
	emit(fuel...) // fuel = that

	for i, s := range kept {
		payload := s.payload
		switch s.id {
		case sectionType: // new types for the tick, () -> i32, spine.errno, (i32) -> i32, and touch_preopen, () -> ()
			payload, err = appendToVector(payload, []byte{0x60, 0x00, 0x01, 0x7f})
			if err == nil {
				payload, err = appendToVector(payload, []byte{0x60, 0x01, 0x7f, 0x01, 0x7f})
			}
			if err == nil && fdSync >= 0 {
				payload, err = appendToVector(payload, []byte{0x60, 0x00, 0x00})
			}
		case sectionImport: // import spine.tick, then spine.NAME for each check, then spine.errno
			payload, err = appendToVector(payload, importEntry("spine", TickImport, uint64(len(types))))
			for _, g := range guards {
				if err == nil && g.check {
					payload, err = appendToVector(payload, importEntry("spine", g.name, g.typ))
				}
			}
			if err == nil && hasErrno {
				payload, err = appendToVector(payload, importEntry("spine", ErrnoImport, uint64(len(types)+1)))
			}
		case sectionFunction: // the guards' functions, then touch_preopen
			for _, g := range guards {
				if err == nil {
					payload, err = appendToVector(payload, appendULEB(nil, g.typ))
				}
			}
			if err == nil && fdSync >= 0 {
				payload, err = appendToVector(payload, appendULEB(nil, uint64(len(types)+2)))
			}
		case sectionGlobal: // the fuel: (mut i32) = 0, so the first loop ticks at once
			payload, err = appendToVector(payload, []byte{0x7f, 0x01, 0x41, 0x00, 0x0b})
		case sectionExport:
			payload, err = renumberExports(payload, shift)
			if err == nil && fdSync >= 0 {
				entry := appendULEB(nil, uint64(len(TouchPreopenExport)))
				entry = append(entry, TouchPreopenExport...)
				payload, err = appendToVector(payload, appendULEB(append(entry, 0x00), touch))
			}
		case sectionStart:
			var idx uint64
			if idx, _, err = uleb(payload, 0); err == nil {
				payload = appendULEB(nil, shift(idx))
			}
		case sectionElement:
			payload, err = renumberElements(payload, shift)
		case sectionCode:
			// The added bodies go in as the section is rewritten: it is most
			// of the module, and New instruments it every time.
			var bodies [][]byte
			for k, g := range guards {
				check := -1
				if g.check {
					check = int(guardImport(k))
				}
				restate := -1
				if g.errno {
					restate = int(errnoImport)
				}
				body := guardBody(len(types[g.typ].params), check, restate, g.orig)
				bodies = append(bodies, append(appendULEB(nil, uint64(len(body))), body...))
			}
			if fdSync >= 0 { // fd_sync(3), fd_sync(4), their errnos dropped
				body := []byte{0x00}
				for _, fd := range []byte{3, 4} {
					body = append(body, 0x41, fd, 0x10)
					body = appendULEB(body, uint64(fdSync))
					body = append(body, 0x1a)
				}
				body = append(body, 0x0b)
				bodies = append(bodies, append(appendULEB(nil, uint64(len(body))), body...))
			}
			loopCheck := check
			if !ticks {
				loopCheck = nil
			}
			payload, err = instrumentCode(payload, loopCheck, shift, bodies)
		}
		if err != nil {
			return nil, nil, err
		}
		kept[i].payload = payload
	}
	return assemble(kept), check, nil
}

// importEntry encodes an import of a function of type typ.
func importEntry(module, name string, typ uint64) []byte {
	entry := appendULEB(nil, uint64(len(module)))
	entry = append(entry, module...)
	entry = appendULEB(entry, uint64(len(name)))
	entry = append(entry, name...)
	entry = append(entry, 0x00)
	return appendULEB(entry, typ)
}

// guardBody is the code of a wrapper's function, for a WASI function of
// params parameters that returns an errno, with a check (its index, or -1
// for none) and a restatement (spine.errno's index, or -1 for none):
//
//	errno := check(params...); if errno == 0 { errno = wasi(params...) }
//	if errno != 0 { errno = restate(errno) }; return errno
func guardBody(params, check, restate int, wasi uint64) []byte {
	body := []byte{0x01, 0x01, 0x7f} // one local: the errno
	local := appendULEB(nil, uint64(params))
	getParams := func() {
		for p := 0; p < params; p++ {
			body = append(body, 0x20)
			body = appendULEB(body, uint64(p))
		}
	}
	callWASI := func() {
		getParams()
		body = append(body, 0x10)
		body = appendULEB(body, wasi)
	}
	if check >= 0 {
		getParams()
		body = append(body, 0x10)
		body = appendULEB(body, uint64(check))
		body = append(body, 0x22) // local.tee errno
		body = append(body, local...)
		body = append(body, 0x04, 0x7f, 0x20) // if (result i32) errno
		body = append(body, local...)
		body = append(body, 0x05) // else
		callWASI()
		body = append(body, 0x0b) // end if
	} else {
		callWASI()
	}
	if restate >= 0 {
		body = append(body, 0x22) // local.tee errno
		body = append(body, local...)
		body = append(body, 0x04, 0x7f, 0x20) // if (result i32) errno
		body = append(body, local...)
		body = append(body, 0x10)
		body = appendULEB(body, uint64(restate))
		body = append(body, 0x05, 0x41, 0x00, 0x0b) // else 0, end if
	}
	return append(body, 0x0b) // end function
}

// funcType is a function type: its parameter and result value types.
type funcType struct{ params, results []byte }

func parseTypes(payload []byte) ([]funcType, error) {
	count, i, err := uleb(payload, 0)
	if err != nil {
		return nil, err
	}
	types := make([]funcType, 0, min(count, uint64(len(payload))))
	for k := uint64(0); k < count; k++ {
		if i >= len(payload) || payload[i] != 0x60 {
			return nil, fmt.Errorf("type %d is not a function type", k)
		}
		i++
		var ft funcType
		for _, list := range []*[]byte{&ft.params, &ft.results} {
			n, m, err := uleb(payload, i)
			if err != nil {
				return nil, err
			}
			i += m
			if i+int(n) > len(payload) || int(n) < 0 {
				return nil, fmt.Errorf("type %d runs past the type section", k)
			}
			*list = payload[i : i+int(n)]
			i += int(n)
		}
		types = append(types, ft)
	}
	return types, nil
}

// importList is what instrument needs of the import section: each imported
// function, in index order, and how many globals are imported.
type importList struct {
	funcs   []funcImport
	globals uint64
}

type funcImport struct {
	module, name string
	typ          uint64
}

func renumberExports(payload []byte, shift func(uint64) uint64) ([]byte, error) {
	count, i, err := uleb(payload, 0)
	if err != nil {
		return nil, err
	}
	out := appendULEB(nil, count)
	for k := uint64(0); k < count; k++ {
		n, m, err := uleb(payload, i)
		if err != nil || i+m+int(n)+1 > len(payload) {
			return nil, errors.New("truncated export")
		}
		nameEnd := i + m + int(n)
		kind := payload[nameEnd]
		idx, m2, err := uleb(payload, nameEnd+1)
		if err != nil {
			return nil, err
		}
		out = append(out, payload[i:nameEnd+1]...)
		if kind == 0 {
			idx = shift(idx)
		}
		out = appendULEB(out, idx)
		i = nameEnd + 1 + m2
	}
	return out, nil
}

// renumberElements handles the element segments LLVM writes: active, table 0,
// a constant offset, a vector of function indices (flags 0).
func renumberElements(payload []byte, shift func(uint64) uint64) ([]byte, error) {
	count, i, err := uleb(payload, 0)
	if err != nil {
		return nil, err
	}
	out := appendULEB(nil, count)
	for k := uint64(0); k < count; k++ {
		flags, m, err := uleb(payload, i)
		if err != nil {
			return nil, err
		}
		if flags != 0 {
			return nil, fmt.Errorf("element segment %d: flags %d not supported", k, flags)
		}
		// The offset: i32.const N or global.get G, then end.
		exprEnd := i + m
		if exprEnd >= len(payload) || (payload[exprEnd] != 0x41 && payload[exprEnd] != 0x23) {
			return nil, fmt.Errorf("element segment %d: offset is not a constant or a global", k)
		}
		_, width, err := sleb64(payload, exprEnd+1) // a global's index is as long read either way
		if err != nil {
			return nil, err
		}
		exprEnd += 1 + width
		if exprEnd >= len(payload) || payload[exprEnd] != 0x0b {
			return nil, fmt.Errorf("element segment %d: offset expression is not a single instruction", k)
		}
		out = append(out, payload[i:exprEnd+1]...)
		i = exprEnd + 1
		n, m, err := uleb(payload, i)
		if err != nil {
			return nil, err
		}
		i += m
		out = appendULEB(out, n)
		for e := uint64(0); e < n; e++ {
			idx, m, err := uleb(payload, i)
			if err != nil {
				return nil, err
			}
			i += m
			out = appendULEB(out, shift(idx))
		}
	}
	return out, nil
}

func parseImports(payload []byte) (importList, error) {
	var c importList
	count, i, err := uleb(payload, 0)
	if err != nil {
		return c, err
	}
	for k := uint64(0); k < count; k++ {
		var names [2]string // module and field names
		for j := range names {
			n, m, err := uleb(payload, i)
			if err != nil {
				return c, err
			}
			i += m
			if i+int(n) > len(payload) || int(n) < 0 {
				return c, errors.New("truncated import")
			}
			names[j] = string(payload[i : i+int(n)])
			i += int(n)
		}
		if i >= len(payload) {
			return c, errors.New("truncated import")
		}
		kind := payload[i]
		i++
		switch kind {
		case 0: // func: type index
			typ, m, err := uleb(payload, i)
			if err != nil {
				return c, err
			}
			c.funcs = append(c.funcs, funcImport{names[0], names[1], typ})
			i += m
		case 1: // table: reftype, limits
			i++
			if i, err = skipLimits(payload, i); err != nil {
				return c, err
			}
		case 2: // memory: limits
			if i, err = skipLimits(payload, i); err != nil {
				return c, err
			}
		case 3: // global: valtype, mutability
			c.globals++
			i += 2
		default:
			return c, fmt.Errorf("unknown import kind %d", kind)
		}
	}
	return c, nil
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

// appendToVector adds encoded entries to a section that is a vector.
func appendToVector(payload []byte, entries ...[]byte) ([]byte, error) {
	count, n, err := uleb(payload, 0)
	if err != nil {
		return nil, err
	}
	size := len(payload) + 5
	for _, e := range entries {
		size += len(e)
	}
	out := appendULEB(make([]byte, 0, size), count+uint64(len(entries)))
	out = append(out, payload[n:]...)
	for _, e := range entries {
		out = append(out, e...)
	}
	return out, nil
}

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
	}
	return append(out, fn[copied:]...), nil
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
