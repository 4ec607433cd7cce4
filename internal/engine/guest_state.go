package engine

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
)

// State is a Guest's state between two runs, as a difference from the image
// it started from (docs/rationale.md, "One Guest state"): the size of its
// linear memory and the pages that differ from the image's. The rest of the
// instance's state is the image's by construction: the descriptor table holds
// only the Guest's own descriptors (State refuses otherwise), the stack
// pointer is back at its start between calls, and the captures are per run.
type State struct {
	Memory uint64   // bytes of linear memory, a whole number of wasm pages
	Pages  []uint32 // the StatePageSize pages that differ from the image, ascending
	Raw    []byte   // a bit per page (bit i%8 of byte i/8): set when its data is the page itself
	Data   []byte   // each of those pages XOR the image's (zero past its end), or the page itself, in order
}

// rawOver is how many bytes of a page must differ from the image's for State
// to keep the page itself rather than its XOR: a page mostly rewritten XOR
// the image's leftovers is noise, where the page itself (text, bytecode)
// compresses. Measured on imports of fractions and statistics: 1,024 to
// 2,048 give the smallest snapshots, 40 % smaller than XOR alone.
const rawOver = 1536

// StatePageSize is the unit of a State's difference: the host's page, which
// is what copy-on-write tracks.
const StatePageSize = 4096

// ErrFilesOpen is State's error for a Guest holding files or directories
// open: wazero keeps them outside linear memory, where no State can carry them.
var ErrFilesOpen = errors.New("the Guest holds files open")

// NewSession returns a Guest for a session, with at most maxMemory bytes of
// linear memory (0: MemoryLimit): one the pool has ready when there is one —
// a Guest reset to the image, whose pages earlier runs already made its own,
// so the session's runs do not pay a page fault for each page they write (on
// a busy machine, tens of microseconds a page) — or a new one from the image.
// The caller closes it; it never goes back to the pool.
func (e *Engine) NewSession(ctx context.Context, maxMemory uint64) (*Instance, error) {
	if maxMemory == 0 || maxMemory > e.cfg.MemoryLimit {
		maxMemory = e.cfg.MemoryLimit
	}
	if e.pool != nil {
		if inst := e.pool.take(); inst != nil {
			e.pool.want()
			if maxMemory == e.cfg.MemoryLimit || inst.cow != nil && inst.cow.setLimit(maxMemory) {
				inst.session = true
				return inst, nil
			}
			inst.Close()
		}
	}
	inst, err := e.newInstance(ctx, e.image, maxMemory)
	if err != nil {
		return nil, err
	}
	inst.session = true
	return inst, nil
}

// imageBytes is the image inst started from, nil when it started from scratch.
func (inst *Instance) imageBytes() []byte {
	switch {
	case inst.img == nil:
		return nil
	case inst.img.memfd != nil:
		return inst.img.memfd.view
	}
	return inst.img.data
}

// FilesOpen is how many files and directories the Guest holds open beyond
// its own descriptors.
func (inst *Instance) FilesOpen() int64 { return inst.fds.open.Load() - inst.fds.baseline }

// State returns the Guest's state as a difference from its image. It must
// not be running. A Guest that holds files open has a state no difference
// can carry: ErrFilesOpen.
func (inst *Instance) State() (*State, error) {
	st, err := inst.StateIndex()
	if err != nil {
		return nil, err
	}
	st.Data = make([]byte, len(st.Pages)*StatePageSize)
	for i := range st.Pages {
		inst.StatePage(st, i, st.Data[i*StatePageSize:(i+1)*StatePageSize])
	}
	return st, nil
}

// StateIndex is State without the pages' data (Data nil): StatePage gives
// each, so that a caller can stream them with one page of memory. The Guest
// must not run between the two.
func (inst *Instance) StateIndex() (*State, error) {
	base := inst.imageBytes()
	if base == nil {
		return nil, errors.New("spine: a Guest started from scratch has no image to differ from")
	}
	if n := inst.FilesOpen(); n > 0 {
		return nil, fmt.Errorf("%w (%d)", ErrFilesOpen, n)
	}
	buf, err := inst.memoryBytes()
	if err != nil {
		return nil, err
	}
	st := &State{Memory: uint64(len(buf))}
	var xor [StatePageSize]byte
	diff := func(p int) {
		page := buf[p*StatePageSize : (p+1)*StatePageSize]
		was := pageOf(base, p)
		if was == nil && isZero(page) || was != nil && bytes.Equal(page, was) {
			return
		}
		i := len(st.Pages)
		st.Pages = append(st.Pages, uint32(p))
		if i%8 == 0 {
			st.Raw = append(st.Raw, 0)
		}
		if was != nil {
			subtle.XORBytes(xor[:], page, was)
			if nonZero(xor[:]) > rawOver {
				st.Raw[i/8] |= 1 << (i % 8)
			}
		}
	}
	if candidates, ok := inst.cow.touched(len(buf)); ok {
		for _, p := range candidates {
			diff(int(p))
		}
	} else {
		for p := 0; p < len(buf)/StatePageSize; p++ {
			diff(p)
		}
	}
	return st, nil
}

// StatePage writes the data of st's i-th page, as State keeps it, to dst
// (StatePageSize bytes); st is the Guest's StateIndex.
func (inst *Instance) StatePage(st *State, i int, dst []byte) {
	buf, _ := inst.memoryBytes()
	p := int(st.Pages[i])
	page := buf[p*StatePageSize : (p+1)*StatePageSize]
	was := pageOf(inst.imageBytes(), p)
	if was == nil || st.Raw[i/8]&(1<<(i%8)) != 0 {
		copy(dst, page)
		return
	}
	subtle.XORBytes(dst, page, was)
}

// memoryBytes is the Guest's linear memory, handed out (cowMemory.exposed).
func (inst *Instance) memoryBytes() ([]byte, error) {
	inst.cow.exposed()
	mem := inst.mod.Memory()
	buf, ok := mem.Read(0, mem.Size())
	if !ok {
		return nil, fmt.Errorf("%w: cannot read memory", ErrGuest)
	}
	return buf, nil
}

// pageOf is page p of the image base, nil past its end.
func pageOf(base []byte, p int) []byte {
	if (p+1)*StatePageSize > len(base) {
		return nil
	}
	return base[p*StatePageSize : (p+1)*StatePageSize]
}

// Check reports whether st could be the state of a Guest of this engine with
// at most maxMemory bytes of memory (0: MemoryLimit), without restoring it.
func (e *Engine) Check(st *State, maxMemory uint64) error {
	if uint64(len(st.Data)) != uint64(len(st.Pages))*StatePageSize {
		return fmt.Errorf("%d bytes of data for %d pages", len(st.Data), len(st.Pages))
	}
	return e.CheckIndex(st, maxMemory)
}

// CheckIndex is Check without st's Data: of a StateIndex, whose pages
// RestoreFunc fills.
func (e *Engine) CheckIndex(st *State, maxMemory uint64) error {
	if e.image == nil {
		return errors.New("a Guest started from scratch has no image to restore onto")
	}
	if maxMemory == 0 || maxMemory > e.cfg.MemoryLimit {
		maxMemory = e.cfg.MemoryLimit
	}
	switch {
	case st.Memory%WasmPageSize != 0:
		return fmt.Errorf("memory of %d bytes is not a whole number of pages", st.Memory)
	case st.Memory < uint64(e.image.size):
		return fmt.Errorf("memory of %d bytes is smaller than the image's %d", st.Memory, e.image.size)
	case st.Memory > maxMemory:
		return fmt.Errorf("memory of %d bytes is over the limit of %d", st.Memory, maxMemory)
	case len(st.Raw) != (len(st.Pages)+7)/8:
		return fmt.Errorf("%d bytes of page kinds for %d pages", len(st.Raw), len(st.Pages))
	}
	last := -1
	for _, p := range st.Pages {
		if int(p) <= last || uint64(p) >= st.Memory/StatePageSize {
			return fmt.Errorf("page %d out of order or past the memory's end", p)
		}
		last = int(p)
	}
	return nil
}

// Restore makes a session's Guest whose state is st (as Check allows).
func (e *Engine) Restore(ctx context.Context, st *State, maxMemory uint64) (*Instance, error) {
	if err := e.Check(st, maxMemory); err != nil {
		return nil, err
	}
	return e.RestoreFunc(ctx, st, maxMemory, func(i int, raw bool, page []byte) error {
		data := st.Data[i*StatePageSize : (i+1)*StatePageSize]
		if raw {
			copy(page, data)
		} else {
			subtle.XORBytes(page, page, data)
		}
		return nil
	})
}

// RestoreFunc makes a session's Guest whose state is st's index (as
// CheckIndex allows) with pages fill writes: fill gets each page of
// st.Pages in order, as the image has it (zero past its end), and makes it
// the page itself (raw) or XORs the difference into it. An error of fill
// ends the restore with that error.
func (e *Engine) RestoreFunc(ctx context.Context, st *State, maxMemory uint64, fill func(i int, raw bool, page []byte) error) (*Instance, error) {
	if err := e.CheckIndex(st, maxMemory); err != nil {
		return nil, err
	}
	inst, err := e.NewSession(ctx, maxMemory)
	if err != nil {
		return nil, err
	}
	mem := inst.mod.Memory()
	if have, want := mem.Size()/WasmPageSize, uint32(st.Memory/WasmPageSize); want > have {
		if _, ok := mem.Grow(want - have); !ok {
			inst.Close()
			return nil, fmt.Errorf("spine: cannot grow a Guest's memory to %d bytes", st.Memory)
		}
	}
	buf, err := inst.memoryBytes()
	if err != nil {
		inst.Close()
		return nil, err
	}
	inst.cow.populate(st.Pages)
	for i, p := range st.Pages {
		page := buf[int(p)*StatePageSize : (int(p)+1)*StatePageSize]
		if err := fill(i, st.Raw[i/8]&(1<<(i%8)) != 0, page); err != nil {
			inst.Close()
			return nil, err
		}
	}
	inst.pages = mem.Size() / WasmPageSize
	return inst, nil
}

// nonZero counts the bytes of b that are not zero.
func nonZero(b []byte) int {
	n := 0
	for _, c := range b {
		if c != 0 {
			n++
		}
	}
	return n
}

// sliceMemory is linear memory in a Go slice with a cap of its own, for a
// Guest whose memory limit is below the engine's without a copy-on-write
// mapping to carry it.
type sliceMemory struct {
	buf []byte
	max uint64
}

// Reallocate implements experimental.LinearMemory.
func (m *sliceMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	grown := make([]byte, size, min(max(size, 2*uint64(cap(m.buf))), m.max))
	copy(grown, m.buf)
	m.buf = grown
	return m.buf
}

// Free implements experimental.LinearMemory.
func (m *sliceMemory) Free() { m.buf = nil }
