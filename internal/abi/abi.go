// Package abi is the contract between the Host and the Guest, written once
// (docs/abi.md): the ABI version, the limits both sides keep, the answers of
// the Host's imports, every function the Guest imports from the Host (module
// "spine") and every function it exports, each with its WebAssembly
// signature. The Guest's side is guest/c/spine.c, which exports the limits to
// its Python (_spine.MAX_MESSAGE, _spine.MAX_ERROR_TEXT); contract_test.go
// checks spine.c, the Guest's Python and docs/abi.md against this table.
package abi

import (
	"context"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Version is the Guest ABI this Host speaks: the Guest's abi_version answers it.
const Version = 1

// Module is the name of the Host module the Guest imports from.
const Module = "spine"

// MaxMessage caps every tool request and response crossing the bridge, in
// bytes; the Guest's response buffer is this large.
const MaxMessage = 1 << 20

// MaxErrorText is the most characters of a Python error's message, and of its
// traceback, that the Guest puts in an execute response.
const MaxErrorText = 64 << 10

// What the imports answer besides the length of a response they wrote.
const (
	// NotPrepared is prepare's answer when it started no early read; it is
	// never a handle.
	NotPrepared uint32 = 0
	// Failed is call's, resolve's and peek's answer when no response was
	// written: the Guest's buffer is outside its memory, or too small.
	Failed uint32 = 0xFFFFFFFF
	// PeekRunning is peek's answer while the read is still running.
	PeekRunning uint32 = 0xFFFFFFFE
	// PeekNone is peek's answer when there is no such read (claimed,
	// cancelled, unknown), or it is not handed over.
	PeekNone uint32 = 0xFFFFFFFD
)

// Func is one function crossing the boundary: its name and signature.
type Func struct {
	Name    string
	Params  []api.ValueType
	Results []api.ValueType
}

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// The Host's imports: the Guest's bridge to its tools (bridge.go).
var (
	Call    = Func{"call", []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}}         // (ptr, size, out, capacity) → length | Failed
	Prepare = Func{"prepare", []api.ValueType{i32, i32}, []api.ValueType{i32}}                // (ptr, size) → handle | NotPrepared
	Resolve = Func{"resolve", []api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}} // (id, ptr, size, out, capacity) → as call
	Peek    = Func{"peek", []api.ValueType{i32, i32, i32}, []api.ValueType{i32}}              // (id, out, capacity) → length | PeekRunning | PeekNone | Failed
)

// Imports are the Host's imports, in the order docs/abi.md lists them.
var Imports = []Func{Call, Prepare, Resolve, Peek}

// The Guest's exports.
var (
	Initialize  = Func{"_initialize", nil, nil} // the WASI reactor's constructor (the toolchain's)
	ABIVersion  = Func{"abi_version", nil, []api.ValueType{i32}}
	Init        = Func{"init", nil, []api.ValueType{i32}}
	Alloc       = Func{"alloc", []api.ValueType{i32}, []api.ValueType{i32}}
	Release     = Func{"release", []api.ValueType{i32}, nil}
	Execute     = Func{"execute", []api.ValueType{i32, i32}, []api.ValueType{i64}}
	PrefixBegin = Func{"prefix_begin", []api.ValueType{i32, i32}, []api.ValueType{i32}}
	PrefixFeed  = Func{"prefix_feed", []api.ValueType{i32, i32}, []api.ValueType{i32}}
	Wake        = Func{"wake", nil, []api.ValueType{i32}}
	Interrupt   = Func{"interrupt", nil, []api.ValueType{i32}}
)

// Export is one of the Guest's exports; an optional one may be missing.
type Export struct {
	Func
	Optional bool
}

// Exports are the Guest's exported functions, in the order docs/abi.md lists
// them (its memory, "memory", aside).
var Exports = []Export{
	{Func: Initialize}, {Func: ABIVersion}, {Func: Init}, {Func: Alloc}, {Func: Release},
	{Func: Execute}, {Func: PrefixBegin}, {Func: PrefixFeed},
	{Func: Wake, Optional: true}, {Func: Interrupt, Optional: true},
}

// Host is the Host's side of the imports, one function each, typed as the
// import is. A nil function answers as a Host without tools: call and resolve
// Failed, prepare NotPrepared, peek PeekNone.
type Host struct {
	Call    func(ctx context.Context, m api.Module, ptr, size, out, capacity uint32) uint32
	Prepare func(ctx context.Context, m api.Module, ptr, size uint32) uint32
	Resolve func(ctx context.Context, m api.Module, id, ptr, size, out, capacity uint32) uint32
	Peek    func(ctx context.Context, m api.Module, id, out, capacity uint32) uint32
}

// Register adds h's functions to b, the builder of the Host module Module,
// with the table's names and signatures, without reflection.
func (h Host) Register(b wazero.HostModuleBuilder) wazero.HostModuleBuilder {
	call, prepare, resolve, peek := h.Call, h.Prepare, h.Resolve, h.Peek
	if call == nil {
		call = func(context.Context, api.Module, uint32, uint32, uint32, uint32) uint32 { return Failed }
	}
	if prepare == nil {
		prepare = func(context.Context, api.Module, uint32, uint32) uint32 { return NotPrepared }
	}
	if resolve == nil {
		resolve = func(context.Context, api.Module, uint32, uint32, uint32, uint32, uint32) uint32 { return Failed }
	}
	if peek == nil {
		peek = func(context.Context, api.Module, uint32, uint32, uint32) uint32 { return PeekNone }
	}
	b = export(b, Call, func(ctx context.Context, m api.Module, s []uint64) {
		s[0] = uint64(call(ctx, m, uint32(s[0]), uint32(s[1]), uint32(s[2]), uint32(s[3])))
	})
	b = export(b, Prepare, func(ctx context.Context, m api.Module, s []uint64) {
		s[0] = uint64(prepare(ctx, m, uint32(s[0]), uint32(s[1])))
	})
	b = export(b, Resolve, func(ctx context.Context, m api.Module, s []uint64) {
		s[0] = uint64(resolve(ctx, m, uint32(s[0]), uint32(s[1]), uint32(s[2]), uint32(s[3]), uint32(s[4])))
	})
	return export(b, Peek, func(ctx context.Context, m api.Module, s []uint64) {
		s[0] = uint64(peek(ctx, m, uint32(s[0]), uint32(s[1]), uint32(s[2])))
	})
}

// export adds fn to b as the import f.
func export(b wazero.HostModuleBuilder, f Func, fn api.GoModuleFunc) wazero.HostModuleBuilder {
	return b.NewFunctionBuilder().WithGoModuleFunction(fn, f.Params, f.Results).Export(f.Name)
}
