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
	p, kept, err := scan(secs)
	if err != nil {
		return nil, nil, err
	}
	if err := p.findGuards(); err != nil {
		return nil, nil, err
	}
	check := fuelCheck(appendULEB(nil, p.imports.globals+p.definedGlobals), p.tick())
	for i, s := range kept {
		loopCheck := check
		if !ticks {
			loopCheck = nil
		}
		payload, err := p.rewrite(s, loopCheck)
		if err != nil {
			return nil, nil, err
		}
		kept[i].payload = payload
	}
	return assemble(kept), check, nil
}

// guard is a wrapped WASI import.
type guard struct {
	name  string
	orig  uint64 // the WASI import's function index
	typ   uint64
	check bool // it has a guard: the import spine.NAME
	errno bool // its failures go through spine.errno
}

// plan is what instrument learned of the module and where what it adds goes.
type plan struct {
	imports        importList
	types          []funcType
	definedGlobals uint64
	definedFuncs   uint64

	// The wrapped imports: the guarded ones first, in import order, then
	// those only restated.
	guards   []guard
	nChecks  int
	fdSync   int // wasi_snapshot_preview1.fd_sync's function index, or -1
	hasErrno bool
	added    uint64            // imports added: spine.tick, one per check, then spine.errno
	wrapped  map[uint64]uint64 // a wrapped import's index → its guard's function
}

// scan reads the sections instrument needs and returns the sections it
// keeps (custom sections name functions by index: they are dropped).
func scan(secs []section) (*plan, []section, error) {
	p := &plan{fdSync: -1}
	seen := map[byte]bool{}
	kept := secs[:0:0]
	var err error
	for _, s := range secs {
		seen[s.id] = true
		switch s.id {
		case sectionCustom:
			continue
		case sectionType:
			p.types, err = parseTypes(s.payload)
		case sectionImport:
			p.imports, err = parseImports(s.payload)
		case sectionFunction:
			p.definedFuncs, _, err = uleb(s.payload, 0)
		case sectionGlobal:
			p.definedGlobals, _, err = uleb(s.payload, 0)
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
	return p, kept, nil
}

// findGuards finds the imports to wrap and numbers what is added.
func (p *plan) findGuards() error {
	for pass := 0; pass < 2; pass++ {
		for idx, imp := range p.imports.funcs {
			if pass == 0 && imp.module == "wasi_snapshot_preview1" && imp.name == "fd_sync" {
				p.fdSync = idx
			}
			check := slices.Contains(GuardedImports, imp.name)
			errno := slices.Contains(ErrnoImports, imp.name)
			if imp.module != "wasi_snapshot_preview1" || check != (pass == 0) || !check && !errno {
				continue
			}
			if imp.typ >= uint64(len(p.types)) {
				return fmt.Errorf("import %s: no type %d", imp.name, imp.typ)
			}
			if ft := p.types[imp.typ]; len(ft.results) != 1 || ft.results[0] != 0x7f {
				return fmt.Errorf("import %s does not return an errno", imp.name)
			}
			p.guards = append(p.guards, guard{imp.name, uint64(idx), imp.typ, check, errno})
			if check {
				p.nChecks++
			}
		}
	}
	p.hasErrno = slices.ContainsFunc(p.guards, func(g guard) bool { return g.errno })
	p.added = 1 + uint64(p.nChecks)
	if p.hasErrno {
		p.added++
	}
	p.wrapped = map[uint64]uint64{}
	for k, g := range p.guards {
		p.wrapped[g.orig] = p.wrapper(k)
	}
	return nil
}

func (p *plan) nImported() uint64 { return uint64(len(p.imports.funcs)) }

// tick is the tick import's function index.
func (p *plan) tick() uint64 { return p.nImported() }

// guardImport is the k-th guard's import.
func (p *plan) guardImport(k int) uint64 { return p.nImported() + 1 + uint64(k) }

func (p *plan) errnoImport() uint64 { return p.nImported() + 1 + uint64(p.nChecks) }

// wrapper is the k-th guard's new function.
func (p *plan) wrapper(k int) uint64 { return p.nImported() + p.added + p.definedFuncs + uint64(k) }

// touch is touch_preopen's function, after the guards' functions.
func (p *plan) touch() uint64 { return p.wrapper(len(p.guards)) }

// shift is where a function index of the input goes.
func (p *plan) shift(idx uint64) uint64 {
	if idx >= p.nImported() {
		return idx + p.added
	}
	if w, ok := p.wrapped[idx]; ok {
		return w
	}
	return idx
}

// fuelCheck is the check inserted at every loop header: fuel is the fuel
// global's index (ULEB), tick the tick import's function.
func fuelCheck(fuel []byte, tick uint64) []byte {
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
	return check
}

// rewrite returns the payload of section s as instrumented; loopCheck is
// inserted at every loop header (nil: none).
func (p *plan) rewrite(s section, loopCheck []byte) ([]byte, error) {
	payload := s.payload
	var err error
	ntypes := uint64(len(p.types))
	switch s.id {
	case sectionType: // new types for the tick, () -> i32, spine.errno, (i32) -> i32, and touch_preopen, () -> ()
		payload, err = appendToVector(payload, []byte{0x60, 0x00, 0x01, 0x7f})
		if err == nil {
			payload, err = appendToVector(payload, []byte{0x60, 0x01, 0x7f, 0x01, 0x7f})
		}
		if err == nil && p.fdSync >= 0 {
			payload, err = appendToVector(payload, []byte{0x60, 0x00, 0x00})
		}
	case sectionImport: // import spine.tick, then spine.NAME for each check, then spine.errno
		payload, err = appendToVector(payload, importEntry("spine", TickImport, ntypes))
		for _, g := range p.guards {
			if err == nil && g.check {
				payload, err = appendToVector(payload, importEntry("spine", g.name, g.typ))
			}
		}
		if err == nil && p.hasErrno {
			payload, err = appendToVector(payload, importEntry("spine", ErrnoImport, ntypes+1))
		}
	case sectionFunction: // the guards' functions, then touch_preopen
		for _, g := range p.guards {
			if err == nil {
				payload, err = appendToVector(payload, appendULEB(nil, g.typ))
			}
		}
		if err == nil && p.fdSync >= 0 {
			payload, err = appendToVector(payload, appendULEB(nil, ntypes+2))
		}
	case sectionGlobal: // the fuel: (mut i32) = 0, so the first loop ticks at once
		payload, err = appendToVector(payload, []byte{0x7f, 0x01, 0x41, 0x00, 0x0b})
	case sectionExport:
		payload, err = renumberExports(payload, p.shift)
		if err == nil && p.fdSync >= 0 {
			entry := appendULEB(nil, uint64(len(TouchPreopenExport)))
			entry = append(entry, TouchPreopenExport...)
			payload, err = appendToVector(payload, appendULEB(append(entry, 0x00), p.touch()))
		}
	case sectionStart:
		var idx uint64
		if idx, _, err = uleb(payload, 0); err == nil {
			payload = appendULEB(nil, p.shift(idx))
		}
	case sectionElement:
		payload, err = renumberElements(payload, p.shift)
	case sectionCode:
		// The added bodies go in as the section is rewritten: it is most
		// of the module, and New instruments it every time.
		payload, err = instrumentCode(payload, loopCheck, p.shift, p.addedBodies())
	}
	return payload, err
}

// addedBodies are the code of the guards' functions and of touch_preopen,
// each preceded by its size.
func (p *plan) addedBodies() [][]byte {
	var bodies [][]byte
	for k, g := range p.guards {
		check := -1
		if g.check {
			check = int(p.guardImport(k))
		}
		restate := -1
		if g.errno {
			restate = int(p.errnoImport())
		}
		body := guardBody(len(p.types[g.typ].params), check, restate, g.orig)
		bodies = append(bodies, append(appendULEB(nil, uint64(len(body))), body...))
	}
	if p.fdSync >= 0 { // fd_sync(3), fd_sync(4), their errnos dropped
		body := []byte{0x00}
		for _, fd := range []byte{3, 4} {
			body = append(body, 0x41, fd, 0x10)
			body = appendULEB(body, uint64(p.fdSync))
			body = append(body, 0x1a)
		}
		body = append(body, 0x0b)
		bodies = append(bodies, append(appendULEB(nil, uint64(len(body))), body...))
	}
	return bodies
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
