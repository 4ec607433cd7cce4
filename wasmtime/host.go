package wasmtime

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	wt "github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/wasm"
)

// hostFunc is a Host function as wasmtime-go calls it.
type hostFunc = func(*wt.Caller, []wt.Val) ([]wt.Val, *wt.Trap)

// link makes the Guest's linker: wasmtime's WASI preview1 with the
// functions a guarantee rests on answered in Go first (fd_write, poll_oneoff,
// random_get, path_open, fd_renumber: wasi.go, descriptors.go), and the Host
// module: the bridge (call through Config.Call, no early reads), the tick,
// the descriptor checks and the errno restatement.
func (g *Guest) link() error {
	l := wt.NewLinker(g.e.engine)
	g.linker = l
	if err := l.DefineWasi(); err != nil {
		return fmt.Errorf("spine: WASI: %w", err)
	}
	l.AllowShadowing(true)
	t32, t64 := wt.NewValType(wt.KindI32), wt.NewValType(wt.KindI64)
	types := func(n int, t *wt.ValType) []*wt.ValType {
		ts := make([]*wt.ValType, n)
		for i := range ts {
			ts[i] = t
		}
		return ts
	}
	answer := func(v uint32) hostFunc {
		return func(*wt.Caller, []wt.Val) ([]wt.Val, *wt.Trap) { return []wt.Val{i32(v)}, nil }
	}
	one := []*wt.ValType{t32}
	openTypes := append(append(types(5, t32), t64, t64), t32, t32)
	defs := []struct {
		module, name string
		params       []*wt.ValType
		fn           hostFunc
	}{
		{"wasi_snapshot_preview1", "fd_write", types(4, t32), g.writeHost},
		{"wasi_snapshot_preview1", "poll_oneoff", types(4, t32), g.pollHost},
		{"wasi_snapshot_preview1", "random_get", types(2, t32), g.randomHost},
		{abi.Module, abi.Call.Name, types(4, t32), g.callHost},
		{abi.Module, abi.Prepare.Name, types(2, t32), answer(abi.NotPrepared)},
		{abi.Module, abi.Resolve.Name, types(5, t32), answer(abi.Failed)},
		{abi.Module, abi.Peek.Name, types(3, t32), answer(abi.PeekNone)},
		{abi.Module, wasm.TickImport, nil, g.tickHost},
		{abi.Module, "fd_close", one, g.closeHost},
		{abi.Module, "fd_renumber", types(2, t32), g.renumberHost},
		{abi.Module, "path_open", openTypes, g.beforeOpenHost},
		{"wasi_snapshot_preview1", "path_open", openTypes, g.openHost},
		{"wasi_snapshot_preview1", "fd_renumber", types(2, t32), g.renumberWASIHost},
		{abi.Module, wasm.ErrnoImport, one, func(_ *wt.Caller, args []wt.Val) ([]wt.Val, *wt.Trap) {
			return []wt.Val{args[0]}, nil // wasmtime names the errors wazero's file systems could not
		}},
	}
	for _, d := range defs {
		if err := l.FuncNew(d.module, d.name, wt.NewFuncType(d.params, one), d.fn); err != nil {
			return fmt.Errorf("spine: host function %s.%s: %w", d.module, d.name, err)
		}
	}
	return nil
}

// forwardWAT is a module that calls WASI's functions the Host answers
// first for the Guest: WASI reads its arguments from its caller's "memory"
// export, and a call from Go has no caller, so Go calls these, whose
// instance exports the Guest's memory.
const forwardWAT = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $p (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $o (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_renumber" (func $r (param i32 i32) (result i32)))
  (import "guest" "memory" (memory 0))
  (export "memory" (memory 0))
  (func (export "write") (param i32 i32 i32 i32) (result i32)
    local.get 0 local.get 1 local.get 2 local.get 3 call $w)
  (func (export "poll") (param i32 i32 i32 i32) (result i32)
    local.get 0 local.get 1 local.get 2 local.get 3 call $p)
  (func (export "open") (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)
    local.get 0 local.get 1 local.get 2 local.get 3 local.get 4
    local.get 5 local.get 6 local.get 7 local.get 8 call $o)
  (func (export "renumber") (param i32 i32) (result i32)
    local.get 0 local.get 1 call $r))`

// linkForward instantiates the forwarding module beside the Guest, on its
// memory, and keeps its functions: wasmtime's own, for what the Go answers
// hand on.
func (g *Guest) linkForward() error {
	l := wt.NewLinker(g.e.engine)
	defer l.Close()
	if err := l.DefineWasi(); err != nil {
		return err
	}
	if err := l.Define(g.store, "guest", "memory", g.mem); err != nil {
		return err
	}
	inst, err := l.Instantiate(g.store, g.e.forward)
	if err != nil {
		return fmt.Errorf("spine: the WASI forwarding module: %w", err)
	}
	g.fdWrite, g.poll = inst.GetFunc(g.store, "write"), inst.GetFunc(g.store, "poll")
	g.open, g.renumber = inst.GetFunc(g.store, "open"), inst.GetFunc(g.store, "renumber")
	return nil
}

// callHost is the bridge's spine.call(ptr, size, out, capacity): the
// request at ptr to Config.Call, its response written at out when it fits.
func (g *Guest) callHost(c *wt.Caller, args []wt.Val) ([]wt.Val, *wt.Trap) {
	failed := []wt.Val{i32(abi.Failed)}
	ptr, size, out, capacity := uint32(args[0].I32()), uint32(args[1].I32()), uint32(args[2].I32()), uint32(args[3].I32())
	mem := g.mem.UnsafeData(c)
	if g.e.cfg.Call == nil || size > abi.MaxMessage || uint64(ptr)+uint64(size) > uint64(len(mem)) ||
		uint64(out)+uint64(capacity) > uint64(len(mem)) {
		return failed, nil
	}
	response := g.e.cfg.Call(g.runCtx, append([]byte(nil), mem[uint64(ptr):uint64(ptr)+uint64(size)]...))
	mem = g.mem.UnsafeData(c)
	if uint64(len(response)) > uint64(capacity) {
		return failed, nil
	}
	copy(mem[out:], response)
	return []wt.Val{wt.ValI32(int32(len(response)))}, nil
}

// tickHost is spine.tick: the next fuel, or 0 (the Guest traps) once the
// run's context has ended.
func (g *Guest) tickHost(*wt.Caller, []wt.Val) ([]wt.Val, *wt.Trap) {
	if g.runCtx.Err() != nil {
		return []wt.Val{wt.ValI32(0)}, nil
	}
	return []wt.Val{wt.ValI32(wasm.FuelPerTick)}, nil
}

// writeHost is WASI's fd_write: stdout and stderr go to the captures, any
// other descriptor to wasmtime's own fd_write.
func (g *Guest) writeHost(c *wt.Caller, args []wt.Val) ([]wt.Val, *wt.Trap) {
	fd, iovs, n, written := args[0].I32(), uint32(args[1].I32()), uint32(args[2].I32()), uint32(args[3].I32())
	if fd != 1 && fd != 2 {
		r, err := g.fdWrite.Call(c, fd, int32(iovs), int32(n), int32(written))
		if err != nil {
			return nil, wt.NewTrap(err.Error())
		}
		return []wt.Val{wt.ValI32(r.(int32))}, nil
	}
	mem := g.mem.UnsafeData(c)
	if uint64(iovs)+8*uint64(n) > uint64(len(mem)) || uint64(written)+4 > uint64(len(mem)) {
		return []wt.Val{i32(errnoFault)}, nil
	}
	out := &g.stdout
	if fd == 2 {
		out = &g.stderr
	}
	total := uint32(0)
	for i := uint32(0); i < n; i++ {
		buf := uint64(binary.LittleEndian.Uint32(mem[iovs+8*i:]))
		size := uint64(binary.LittleEndian.Uint32(mem[iovs+8*i+4:]))
		if buf+size > uint64(len(mem)) {
			return []wt.Val{i32(errnoFault)}, nil
		}
		out.write(mem[buf : buf+size])
		total += uint32(size)
	}
	binary.LittleEndian.PutUint32(mem[written:], total)
	return []wt.Val{wt.ValI32(0)}, nil
}

// i32 is an i32 value of the bits of v.
func i32(v uint32) wt.Val { return wt.ValI32(int32(v)) }

// capture keeps up to max bytes of a stream, and whether any were dropped.
type capture struct {
	buf       []byte
	max       int
	truncated bool
}

func (c *capture) write(p []byte) {
	if c.truncated { // nothing after the cut, as the wazero engine's capture
		return
	}
	if room := c.max - len(c.buf); len(p) > room {
		p, c.truncated = p[:max(room, 0)], true
		// Drop a rune cut in half by the limit (at most UTFMax-1 bytes).
		for cut := 0; cut < utf8.UTFMax-1 && len(p) > 0; cut++ {
			if r, size := utf8.DecodeLastRune(p); r != utf8.RuneError || size > 1 {
				break
			}
			p = p[:len(p)-1]
		}
	}
	c.buf = append(c.buf, p...)
}

func (c *capture) reset()         { c.buf, c.truncated = c.buf[:0], false }
func (c *capture) String() string { return string(c.buf) }
