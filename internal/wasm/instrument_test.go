package wasm

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spine-run/spine/guest"
	"github.com/tetratelabs/wazero"
)

// spinModule is a hand-assembled module that imports env.nop, defines
// spin() { loop { call env.nop; call helper; br 0 } } and helper() {}, and
// exports spin. After Instrument, spine.tick is function 1, so spin and helper
// move up by one: a wrong renumbering makes spin call itself (a stack overflow)
// instead of helper.
var spinModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // types: () -> ()
	0x02, 0x0b, 0x01, 0x03, 'e', 'n', 'v', 0x03, 'n', 'o', 'p', 0x00, 0x00, // import env.nop
	0x03, 0x03, 0x02, 0x00, 0x00, // functions: spin, helper
	0x05, 0x03, 0x01, 0x00, 0x01, // memory, min 1 page
	0x06, 0x06, 0x01, 0x7f, 0x01, 0x41, 0x00, 0x0b, // a global: (mut i32) 0
	0x07, 0x08, 0x01, 0x04, 's', 'p', 'i', 'n', 0x00, 0x01, // export spin (function 1)
	0x0a, 0x10, 0x02, // code: two bodies
	0x0b, 0x00, 0x03, 0x40, 0x10, 0x00, 0x10, 0x02, 0x0c, 0x00, 0x0b, 0x0b, // spin
	0x02, 0x00, 0x0b, // helper
	0x00, 0x04, 0x01, 'n', 0x00, 0x00, // a custom section, dropped
}

func TestTicksStopALoop(t *testing.T) {
	ctx := context.Background()
	instrumented, err := Instrument(spinModule)
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntime(ctx) // no WithCloseOnContextDone: only a tick can stop it
	defer rt.Close(ctx)
	var nops, ticks atomic.Int64
	var stop atomic.Bool
	_, err = rt.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithFunc(func() { nops.Add(1) }).Export("nop").Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = rt.NewHostModuleBuilder("spine").NewFunctionBuilder().
		WithFunc(func() uint32 {
			ticks.Add(1)
			if stop.Load() {
				return 0
			}
			return 5
		}).Export(TickImport).Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.Instantiate(ctx, instrumented)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := mod.ExportedFunction("spin").Call(ctx)
		done <- err
	}()
	for nops.Load() < 100 {
		select {
		case err := <-done:
			t.Fatalf("spin returned before it was stopped: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	stop.Store(true)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("spin after the stop: %v", err)
	}
	// One tick per 5 iterations, plus the first.
	if n, k := nops.Load(), ticks.Load(); k < n/5 || k > n/5+2 {
		t.Fatalf("%d iterations, %d ticks", n, k)
	}
}

func TestTicksRefuseWhatTheyDoNotKnow(t *testing.T) {
	simd := append([]byte(nil), spinModule...)
	simd[bytes.Index(simd, []byte{0x0c, 0x00, 0x0b, 0x0b})] = 0xfd // a SIMD prefix where br was
	if _, err := Instrument(simd); err == nil {
		t.Fatal("accepted an instruction it cannot decode")
	}
	if _, err := Instrument([]byte("\x00asm")); err == nil {
		t.Fatal("accepted a truncated module")
	}
}

func TestSplitData(t *testing.T) {
	stripped, segments, err := SplitData(guest.Wasm)
	if err != nil {
		t.Fatal(err)
	}
	if len(segments) == 0 || len(stripped) >= len(guest.Wasm) {
		t.Fatalf("%d segments, %d -> %d bytes", len(segments), len(guest.Wasm), len(stripped))
	}
	if _, _, err := SplitData([]byte("not wasm")); err == nil {
		t.Fatal("accepted a non-wasm binary")
	}
	only, err := DataSegments(guest.Wasm)
	if err != nil {
		t.Fatal(err)
	}
	if len(only) != len(segments) {
		t.Fatalf("DataSegments found %d segments, SplitData %d", len(only), len(segments))
	}
	for i := range only {
		if only[i].Offset != segments[i].Offset || !bytes.Equal(only[i].Data, segments[i].Data) {
			t.Fatalf("segment %d differs", i)
		}
	}
	if none, err := DataSegments(stripped); err != nil || len(none) != 0 {
		t.Fatalf("the stripped module: %d segments, %v", len(none), err)
	}
}

// closeModule imports wasi_snapshot_preview1.fd_close and exports f(fd),
// which calls it. After Instrument, f's call goes through the guard.
var closeModule = func() []byte {
	m := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
		0x01, 0x06, 0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f} // types: (i32) -> i32
	imp := []byte{0x01, 22}
	imp = append(imp, "wasi_snapshot_preview1"...)
	imp = append(imp, 8)
	imp = append(imp, "fd_close"...)
	imp = append(imp, 0x00, 0x00)
	m = append(m, 0x02, byte(len(imp)))
	m = append(m, imp...)
	m = append(m,
		0x03, 0x02, 0x01, 0x00, // functions: f
		0x06, 0x06, 0x01, 0x7f, 0x01, 0x41, 0x00, 0x0b, // a global
		0x07, 0x05, 0x01, 0x01, 'f', 0x00, 0x01, // export f (function 1)
		0x0a, 0x08, 0x01, 0x06, 0x00, 0x20, 0x00, 0x10, 0x00, 0x0b) // f: fd_close(local 0)
	return m
}()

func TestInstrumentGuards(t *testing.T) {
	ctx := context.Background()
	instrumented, err := Instrument(closeModule)
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	var closed, checked []uint32
	_, err = rt.NewHostModuleBuilder("wasi_snapshot_preview1").NewFunctionBuilder().
		WithFunc(func(fd uint32) uint32 { closed = append(closed, fd); return 0 }).Export("fd_close").
		Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = rt.NewHostModuleBuilder("spine").
		NewFunctionBuilder().WithFunc(func() uint32 { return FuelPerTick }).Export(TickImport).
		NewFunctionBuilder().WithFunc(func(fd uint32) uint32 {
		checked = append(checked, fd)
		if fd == 1 {
			return 8 // EBADF: refused before the WASI function
		}
		return 0
	}).Export("fd_close").
		Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.Instantiate(ctx, instrumented)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ fd, want uint64 }{{5, 0}, {1, 8}, {7, 0}} {
		res, err := mod.ExportedFunction("f").Call(ctx, tc.fd)
		if err != nil || res[0] != tc.want {
			t.Fatalf("f(%d) = %v, %v; want %d", tc.fd, res, err, tc.want)
		}
	}
	if fmt.Sprint(checked) != "[5 1 7]" || fmt.Sprint(closed) != "[5 7]" {
		t.Fatalf("checked %v, closed %v; want [5 1 7] and [5 7]", checked, closed)
	}
	if mod.ExportedFunction(TouchPreopenExport) != nil {
		t.Fatal("touch_preopen exported by a module that does not import fd_sync")
	}
}

// TestRenumberElementsOffset: an offset constant whose LEB128 bytes include
// 0x0b (the end opcode), i32.const 11, is read as one instruction.
func TestRenumberElementsOffset(t *testing.T) {
	payload := []byte{0x01, 0x00, 0x41, 0x0b, 0x0b, 0x01, 0x02} // one segment at 11: function 2
	out, err := renumberElements(payload, func(idx uint64) uint64 { return idx + 1 })
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x01, 0x00, 0x41, 0x0b, 0x0b, 0x01, 0x03}; !bytes.Equal(out, want) {
		t.Fatalf("renumbered % x, want % x", out, want)
	}
	if _, err := renumberElements([]byte{0x01, 0x00, 0x42, 0x00, 0x0b, 0x00}, func(i uint64) uint64 { return i }); err == nil {
		t.Fatal("accepted an i64 offset")
	}
}

// codeBodies splits a code section's payload into its function bodies.
func codeBodies(t *testing.T, payload []byte) [][]byte {
	t.Helper()
	count, i, err := uleb(payload, 0)
	if err != nil {
		t.Fatal(err)
	}
	bodies := make([][]byte, 0, count)
	for k := uint64(0); k < count; k++ {
		size, n, err := uleb(payload, i)
		if err != nil || i+n+int(size) > len(payload) {
			t.Fatalf("function %d: truncated", k)
		}
		bodies = append(bodies, payload[i+n:i+n+int(size)])
		i += n + int(size)
	}
	return bodies
}

func TestOmitTicksForMeasurement(t *testing.T) {
	stripped, _, err := SplitData(guest.Wasm)
	if err != nil {
		t.Fatal(err)
	}
	ticked, check, err := instrument(stripped, true)
	if err != nil {
		t.Fatal(err)
	}
	plain, check2, err := instrument(stripped, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(check) == 0 || !bytes.Equal(check, check2) {
		t.Fatalf("checks %x and %x", check, check2)
	}
	tsecs, err := sections(ticked)
	if err != nil {
		t.Fatal(err)
	}
	psecs, err := sections(plain)
	if err != nil {
		t.Fatal(err)
	}
	if len(tsecs) != len(psecs) {
		t.Fatalf("%d sections with ticks, %d without", len(tsecs), len(psecs))
	}
	checks := 0
	for k := range tsecs {
		ts, ps := tsecs[k], psecs[k]
		if ts.id != ps.id {
			t.Fatalf("section %d: id %d with ticks, %d without", k, ts.id, ps.id)
		}
		if ts.id != sectionCode {
			if !bytes.Equal(ts.payload, ps.payload) {
				t.Errorf("section %d (id %d) differs", k, ts.id)
			}
			continue
		}
		tb, pb := codeBodies(t, ts.payload), codeBodies(t, ps.payload)
		if len(tb) != len(pb) {
			t.Fatalf("%d functions with ticks, %d without", len(tb), len(pb))
		}
		for f := range tb {
			n := bytes.Count(tb[f], check)
			checks += n
			if len(tb[f])-len(pb[f]) != n*len(check) || !bytes.Equal(bytes.ReplaceAll(tb[f], check, nil), pb[f]) {
				t.Fatalf("function %d differs by more than its %d checks", f, n)
			}
		}
	}
	if checks < 1000 {
		t.Fatalf("only %d checks in the Guest", checks)
	}
	t.Logf("%d checks of %d bytes; module %d bytes with them, %d without", checks, len(check), len(ticked), len(plain))

	// The switch reaches Instrument, and the module without checks validates.
	OmitTicksForMeasurement.Store(true)
	viaSwitch, err := Instrument(stripped)
	OmitTicksForMeasurement.Store(false)
	if err != nil || !bytes.Equal(viaSwitch, plain) {
		t.Fatalf("Instrument with the switch set: %v, same module %v", err, bytes.Equal(viaSwitch, plain))
	}
	if again, err := Instrument(stripped); err != nil || !bytes.Equal(again, ticked) {
		t.Fatalf("Instrument after the switch was cleared: %v, the ticked module %v", err, bytes.Equal(again, ticked))
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	if _, err := rt.CompileModule(ctx, plain); err != nil {
		t.Fatalf("the module without ticks does not validate: %v", err)
	}
}
