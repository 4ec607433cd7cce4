package spine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spine-run/spine/guest"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// spinModule is a hand-assembled module: func spin() { loop { br 0 } }, exported
// as "spin", plus one global and a memory so the sections addStopChecks extends exist.
var spinModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type section: () -> ()
	0x03, 0x02, 0x01, 0x00, // function section: one function of type 0
	0x05, 0x03, 0x01, 0x00, 0x01, // memory section: one memory, min 1
	0x06, 0x06, 0x01, 0x7f, 0x01, 0x41, 0x00, 0x0b, // global section: (mut i32) 0
	0x07, 0x08, 0x01, 0x04, 's', 'p', 'i', 'n', 0x00, 0x00, // export "spin"
	0x0a, 0x09, 0x01, 0x07, 0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b, // code: loop br 0 end end
}

func TestStopChecksStopALoop(t *testing.T) {
	ctx := context.Background()
	instrumented, err := addStopChecks(spinModule)
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntime(ctx) // no WithCloseOnContextDone: only the flag can stop it
	defer rt.Close(ctx)
	mod, err := rt.Instantiate(ctx, instrumented)
	if err != nil {
		t.Fatal(err)
	}
	flag, ok := mod.ExportedGlobal(stopGlobal).(api.MutableGlobal)
	if !ok {
		t.Fatal("no mutable spine_stop global")
	}
	done := make(chan error, 1)
	go func() {
		_, err := mod.ExportedFunction("spin").Call(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("spin returned before the flag was raised: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	flag.Set(1)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("spin after the flag: %v", err)
	}
}

func TestStopChecksRefuseWhatTheyDoNotKnow(t *testing.T) {
	simd := append([]byte(nil), spinModule...)
	simd[len(simd)-4] = 0xfd // a SIMD prefix where br was
	if _, err := addStopChecks(simd); err == nil {
		t.Fatal("accepted an instruction it cannot decode")
	}
	if _, err := addStopChecks([]byte("\x00asm")); err == nil {
		t.Fatal("accepted a truncated module")
	}
}

func TestSplitData(t *testing.T) {
	stripped, segments, err := splitData(guest.Wasm)
	if err != nil {
		t.Fatal(err)
	}
	if len(segments) == 0 || len(stripped) >= len(guest.Wasm) {
		t.Fatalf("%d segments, %d -> %d bytes", len(segments), len(guest.Wasm), len(stripped))
	}
	if _, _, err := splitData([]byte("not wasm")); err == nil {
		t.Fatal("accepted a non-wasm binary")
	}
}
