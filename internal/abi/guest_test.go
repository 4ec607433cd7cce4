package abi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/engine"
)

// TestArtifact checks the embedded Guest against the table: the functions
// it imports from the Host and those it exports, with their signatures.
func TestArtifact(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the Guest")
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	compiled, err := rt.CompileModule(ctx, guest.Wasm)
	if err != nil {
		t.Fatal(err)
	}
	var imports []string
	for _, f := range compiled.ImportedFunctions() {
		if module, name, _ := f.Import(); module == abi.Module {
			imports = append(imports, describe(abi.Func{Name: name, Params: f.ParamTypes(), Results: f.ResultTypes()}))
		}
	}
	var want []string
	for _, f := range abi.Imports {
		want = append(want, describe(f))
	}
	if fmt.Sprint(imports) != fmt.Sprint(want) {
		t.Errorf("the Guest imports %v from %q, the table has %v", imports, abi.Module, want)
	}
	exports := compiled.ExportedFunctions()
	for _, e := range abi.Exports {
		f, ok := exports[e.Name]
		if !ok {
			t.Errorf("the Guest does not export %s", e.Name)
			continue
		}
		if got := describe(abi.Func{Name: e.Name, Params: f.ParamTypes(), Results: f.ResultTypes()}); got != describe(e.Func) {
			t.Errorf("the Guest exports %s, the table %s", got, describe(e.Func))
		}
	}
}

// TestGuestLimits runs the embedded Guest on a Host built from the table
// (abi.Host without tools) and reads the limits its Python works with.
func TestGuestLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts CPython")
	}
	ctx := context.Background()
	e, err := engine.New(ctx, engine.Config{
		Wasm: guest.Wasm, StdlibZip: guest.StdlibZip,
		MemoryLimit: 256 << 20, MaxOutput: 1 << 20, MaxDescriptors: 64,
		Start: engine.StartFresh, NoDiskCache: true,
		Bridge: abi.Host{},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	inst, err := e.NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	program := `import _spine, sys
from plm import futures
bootstrap = sys.modules["bootstrap"]
result = [_spine.ABI_VERSION, _spine.MAX_MESSAGE, futures.MAX_MESSAGE,
          _spine.MAX_ERROR_TEXT, bootstrap._MAX_ERROR_TEXT,
          _spine.prepare(b'{"tool":"t","args":{}}')]
try:
    _spine.call(b'{"tool":"t","args":{}}')
except RuntimeError:
    result.append("no response")`
	request, _ := json.Marshal(map[string]any{"source": program, "inputs": map[string]any{}, "tools": []any{},
		"early_reads": false, "result_limit": 1 << 20})
	response, err := inst.Execute(inst.Begin(ctx, nil), request, 1<<20)
	inst.End()
	if err != nil {
		t.Fatal(err)
	}
	// Without tools, prepare answers NotPrepared and call Failed, which
	// _spine.call raises as RuntimeError.
	want := fmt.Sprintf(`[%d,%d,%d,%d,%d,%d,"no response"]`, abi.Version, abi.MaxMessage, abi.MaxMessage,
		abi.MaxErrorText, abi.MaxErrorText, abi.NotPrepared)
	var answer struct {
		Value json.RawMessage `json:"value"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(response, &answer); err != nil || string(answer.Value) != want || len(answer.Error) > 0 {
		t.Fatalf("the Guest answered %s, want the value %s", response, want)
	}
}
