package wasmtime

import (
	"encoding/binary"

	wt "github.com/bytecodealliance/wasmtime-go/v39"
)

// The descriptor table is the part of a Guest's state outside its linear
// memory: wasmtime's WASI keeps it, as wazero's does, and no reset of
// memory reaches it. As the wazero engine does (internal/engine,
// descriptors.go), the Host accounts for it: closing or moving one of the
// Guest's own descriptors (0–4: stdio and the two preopened folders) breaks
// the Guest; every descriptor path_open makes is recorded until it is closed
// or moved, a run may hold at most MaxDescriptors of them (EMFILE past it),
// and a Guest that still holds one after its run is not reset. The
// instrumented Guest calls spine.path_open, spine.fd_close and
// spine.fd_renumber before the WASI functions of the same names; path_open
// and fd_renumber themselves are answered here and forwarded to wasmtime's
// (forwardWAT), so that what they did is known.

// imageDescriptors is how many descriptors a new Guest holds: stdio and the
// two preopened folders.
const imageDescriptors = 5

// WASI's errno values the checks answer with.
const (
	errnoBadf  = 8
	errnoMfile = 33
)

// closeHost is spine.fd_close, before the close: closing one of the
// Guest's own descriptors is allowed (the program sees what native Python
// would) but the Guest is not used again. A close of a descriptor the Guest
// holds cannot fail.
func (g *Guest) closeHost(_ *wt.Caller, args []wt.Val) ([]wt.Val, *wt.Trap) {
	fd := args[0].I32()
	if fd >= 0 && fd < imageDescriptors {
		g.broken = true
	}
	delete(g.fds, fd)
	return []wt.Val{i32(errnoSuccess)}, nil
}

// renumberHost is spine.fd_renumber, before the move: onto or off 0–4
// breaks the Guest; a number past what a run may hold is refused (EBADF).
func (g *Guest) renumberHost(_ *wt.Caller, args []wt.Val) ([]wt.Val, *wt.Trap) {
	from, to := args[0].I32(), args[1].I32()
	if from >= 0 && from < imageDescriptors || to >= 0 && to < imageDescriptors {
		g.broken = true
	}
	if to < 0 || int(to) >= imageDescriptors+g.e.cfg.MaxDescriptors {
		return []wt.Val{i32(errnoBadf)}, nil
	}
	return []wt.Val{i32(errnoSuccess)}, nil
}

// beforeOpenHost is spine.path_open: EMFILE once the run holds
// MaxDescriptors descriptors.
func (g *Guest) beforeOpenHost(*wt.Caller, []wt.Val) ([]wt.Val, *wt.Trap) {
	if len(g.fds) >= g.e.cfg.MaxDescriptors {
		return []wt.Val{i32(errnoMfile)}, nil
	}
	return []wt.Val{i32(errnoSuccess)}, nil
}

// openHost is WASI's path_open: wasmtime's, with the descriptor it made
// recorded.
func (g *Guest) openHost(c *wt.Caller, args []wt.Val) ([]wt.Val, *wt.Trap) {
	r, err := g.open.Call(c, args[0].I32(), args[1].I32(), args[2].I32(), args[3].I32(), args[4].I32(),
		args[5].I64(), args[6].I64(), args[7].I32(), args[8].I32())
	if err != nil {
		return nil, wt.NewTrap(err.Error())
	}
	errno := r.(int32)
	if errno == errnoSuccess {
		mem := g.mem.UnsafeData(c)
		if at := uint32(args[8].I32()); uint64(at)+4 <= uint64(len(mem)) {
			g.fds[int32(binary.LittleEndian.Uint32(mem[at:]))] = true
		}
	}
	return []wt.Val{wt.ValI32(errno)}, nil
}

// renumberWASIHost is WASI's fd_renumber: wasmtime's, with the move
// recorded.
func (g *Guest) renumberWASIHost(c *wt.Caller, args []wt.Val) ([]wt.Val, *wt.Trap) {
	from, to := args[0].I32(), args[1].I32()
	r, err := g.renumber.Call(c, from, to)
	if err != nil {
		return nil, wt.NewTrap(err.Error())
	}
	errno := r.(int32)
	if errno == errnoSuccess && from != to {
		if g.fds[from] {
			g.fds[to] = true
		} else {
			delete(g.fds, to) // a descriptor of the Guest's own moved over it
		}
		delete(g.fds, from)
	}
	return []wt.Val{wt.ValI32(errno)}, nil
}
