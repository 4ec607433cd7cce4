// Package spine runs untrusted Python programs inside CPython compiled to
// WebAssembly (WASI), executed in-process by wazero. A program reaches the world
// only through the Go functions ("tools") of a Manifest, called like Python
// functions with keyword arguments.
package spine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/wasm"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// guestABIVersion is the Guest ABI this Host speaks (docs/abi.md).
const guestABIVersion = 1

// Request is one program to run.
type Request struct {
	// Source is the Python program.
	Source string

	// Inputs is the program's global inputs: anything that encodes to a JSON
	// object (json.RawMessage passes through). nil means {}.
	Inputs any

	// Filename names the source in tracebacks. Default "<agent>".
	Filename string

	// Stream, when set, is the program as it streams in (prefix mode, for a
	// program an LLM is still writing); Source must then be empty. The Guest
	// reads each complete top-level statement as it arrives and starts the
	// early reads it can already prove, then runs the whole program with
	// EarlyReads on when the stream ends. If ctx ends first, Run returns and,
	// when Stream is an io.Closer, closes it to unblock a pending Read.
	Stream io.Reader

	// EarlyReads lets the run start tools marked AllowEarlyRead before the
	// program reaches them: the Guest's PLM pass prepares each call whose
	// arguments it can prove, at the earliest point they are known. A run's
	// outcome is the same with early reads on or off (docs/early-reads.md).
	EarlyReads bool

	// Transformed asks for the program as the PLM pass rewrote it, in
	// Output.Transformed. Rendering it costs time: leave it off in production.
	Transformed bool

	// Timeout, when positive, bounds this run on top of ctx.
	Timeout time.Duration
}

// Output is what a run produced.
type Output struct {
	// Value is the JSON encoding of the program's global result, or of its last
	// top-level expression when it never set result; "null" when neither.
	Value json.RawMessage

	// Stdout and Stderr are the captured output, each kept up to
	// Options.MaxOutput bytes; the Truncated flags say whether more was written.
	Stdout          string
	Stderr          string
	StdoutTruncated bool
	StderrTruncated bool

	// ToolCalls is how many tool calls the program made.
	ToolCalls int

	// Transformed is the program as it ran, rewritten by the PLM pass, when
	// Request.Transformed asked for it.
	Transformed string
}

// Runner runs programs against one Manifest. It is safe for concurrent use;
// every Run gets its own clean Guest.
type Runner struct {
	manifest Manifest
	opts     Options
	tools    json.RawMessage // the manifest as the Guest sees it, encoded once

	runtime  wazero.Runtime
	cache    wazero.CompilationCache
	cacheDir string                // "" when compiled code is cached in memory only
	compiled wazero.CompiledModule // the Guest without its data segments
	segments []wasm.DataSegment    // the Guest's data segments, for a start from scratch
	stdlib   []byte                // the standard library archive
	// instrumented says the Guest calls spine.tick from its loops and the
	// descriptor checks before fd_close and path_open (internal/wasm).
	instrumented bool
	mode         StartMode // resolved: never StartAuto
	image        *image    // nil with StartFresh
	pool         *pool     // nil without an image or with PoolSize < 0

	instancesMade atomic.Int64 // Guests instantiated, for tests and statistics
	runsStarted   atomic.Int64

	closing context.Context // done once Close begins: runs in flight stop
	stop    context.CancelFunc
	mu      sync.Mutex
	closed  bool
	runs    sync.WaitGroup
}

// New validates and copies manifest, then compiles the Guest once (through
// wazero's compilation cache, on disk by default). options may be nil.
func New(ctx context.Context, manifest Manifest, options *Options) (*Runner, error) {
	m, err := checkManifest(manifest)
	if err != nil {
		return nil, err
	}
	opts := options.withDefaults()
	if opts.MemoryLimit > guestMaxMemory {
		return nil, fmt.Errorf("spine: MemoryLimit %d is over the Guest's maximum of %d bytes", opts.MemoryLimit, guestMaxMemory)
	}
	if opts.MemoryLimit < 64<<20 {
		return nil, fmt.Errorf("spine: MemoryLimit %d is under the 64 MiB CPython needs", opts.MemoryLimit)
	}
	artifact := Artifact{Wasm: guest.Wasm, StdlibZip: guest.StdlibZip}
	if opts.Artifact != nil {
		artifact = *opts.Artifact
	}

	r := &Runner{manifest: m, opts: opts, tools: guestTools(m), stdlib: artifact.StdlibZip}
	r.closing, r.stop = context.WithCancel(context.Background())
	if err := r.setup(ctx, artifact); err != nil {
		r.Close(context.Background())
		return nil, err
	}
	return r, nil
}

func (r *Runner) setup(ctx context.Context, artifact Artifact) (err error) {
	stripped, segments, err := wasm.SplitData(artifact.Wasm)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrArtifact, err)
	}
	module, err := wasm.Instrument(stripped)
	r.instrumented = err == nil
	if !r.instrumented {
		module = stripped // wazero's own, slower, way to stop it
	}
	if r.cache, r.cacheDir, err = openCodeCache(r.opts, module); err != nil {
		return err
	}
	config := wazero.NewRuntimeConfig().
		WithCloseOnContextDone(!r.instrumented).
		WithMemoryLimitPages(uint32(r.opts.MemoryLimit / wasmPageSize)).
		WithCompilationCache(r.cache)
	r.runtime = wazero.NewRuntimeWithConfig(ctx, config)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r.runtime); err != nil {
		return fmt.Errorf("spine: WASI: %w", err)
	}
	if err := r.instantiateBridge(ctx); err != nil {
		return fmt.Errorf("spine: host module: %w", err)
	}
	compiled, err := r.runtime.CompileModule(ctx, module)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrArtifact, err)
	}
	sealCodeCache(r.cacheDir, module)
	exports := compiled.ExportedFunctions()
	for _, name := range []string{"_initialize", "abi_version", "init", "alloc", "release", "execute", "prefix_begin", "prefix_feed"} {
		if _, ok := exports[name]; !ok {
			return fmt.Errorf("%w: it does not export %s", ErrArtifact, name)
		}
	}
	r.compiled, r.segments = compiled, segments

	switch r.mode = r.opts.Start; r.mode {
	case StartAuto:
		r.mode = StartCopy
		if cowSupported {
			r.mode = StartCOW
		}
	case StartCOW:
		if !cowSupported {
			return fmt.Errorf("spine: %w", errNoCOWHere)
		}
	case StartFresh, StartCopy:
	default:
		return fmt.Errorf("spine: unknown start mode %d", r.opts.Start)
	}
	if r.mode == StartFresh {
		return nil
	}
	if r.image, err = r.prepareImage(ctx, r.mode, imageKey(artifactID(artifact), r.tools)); err != nil {
		return err
	}
	if r.opts.PoolSize > 0 {
		r.pool = newPool(r, r.image, r.opts.PoolSize)
	}
	return nil
}

var errNoCOWHere = errors.New("copy-on-write images need Linux")

// artifactID identifies a Guest artifact: for the embedded one, its manifest,
// which holds the hashes of its files (hashing 15 MB again would cost every
// New about 9 ms); for another, the hashes of its bytes.
func artifactID(a Artifact) []byte {
	if len(a.Wasm) > 0 && len(guest.Wasm) > 0 && &a.Wasm[0] == &guest.Wasm[0] && len(a.Wasm) == len(guest.Wasm) &&
		len(a.StdlibZip) > 0 && &a.StdlibZip[0] == &guest.StdlibZip[0] && len(a.StdlibZip) == len(guest.StdlibZip) {
		return guest.Manifest
	}
	w, z := sha256.Sum256(a.Wasm), sha256.Sum256(a.StdlibZip)
	return append(w[:], z[:]...)
}

// acquire returns a Guest ready for a run: from the pool, from the image, or
// started from scratch.
func (r *Runner) acquire(ctx context.Context) (*instance, error) {
	if r.pool != nil {
		return r.pool.get(ctx)
	}
	return r.newInstance(ctx, r.image)
}

// giveBack returns a Guest after a run; clean says the run ended without a
// trap or a stop.
func (r *Runner) giveBack(inst *instance, clean bool) {
	if r.pool != nil {
		r.pool.put(inst, clean)
		return
	}
	inst.close()
}

// instantiateBridge registers the imports of Guest module "spine" without reflection.
func (r *Runner) instantiateBridge(ctx context.Context) error {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	_, err := r.runtime.NewHostModuleBuilder("spine").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			stack[0] = uint64(r.hostCall(ctx, m, uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])))
		}), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}).
		Export("call").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			stack[0] = uint64(r.hostPrepare(ctx, m, uint32(stack[0]), uint32(stack[1])))
		}), []api.ValueType{i32, i32}, []api.ValueType{i32}).
		Export("prepare").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			stack[0] = uint64(r.hostResolve(ctx, m, uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3]), uint32(stack[4])))
		}), []api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}).
		Export("resolve").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			stack[0] = tick(ctx)
		}), nil, []api.ValueType{i32}).
		Export(wasm.TickImport).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			fd := int32(stack[0])
			stack[0] = wasiErrnoSuccess
			if d := descriptorsFrom(ctx); d != nil {
				stack[0] = uint64(d.beforeClose(fd))
			}
		}), []api.ValueType{i32}, []api.ValueType{i32}).
		Export("fd_close").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			stack[0] = wasiErrnoSuccess
			if d := descriptorsFrom(ctx); d != nil {
				stack[0] = uint64(d.beforeOpen())
			}
		}), []api.ValueType{i32, i32, i32, i32, i32, i64, i64, i32, i32}, []api.ValueType{i32}).
		Export("path_open").
		Instantiate(ctx)
	return err
}

// tick answers an instrumented Guest's spine.tick (internal/wasm): 0 when the
// run's context has ended, so the Guest traps, or the fuel for its next loop
// iterations. Being a call into Go, it also lets the scheduler run others.
func tick(ctx context.Context) uint64 {
	if ctx.Err() != nil {
		return 0
	}
	return wasm.FuelPerTick
}

// Run runs one program. A Python exception ends it with a *PythonError; a
// stopped ctx with an error matching ctx.Err() (context.DeadlineExceeded for a
// time limit). Output is non-nil whenever the program started, errors
// included, so its captured output can be read.
func (r *Runner) Run(ctx context.Context, req Request) (*Output, error) {
	if err := r.begin(); err != nil {
		return nil, err
	}
	defer r.runs.Done()
	if req.Stream != nil && req.Source != "" {
		return nil, fmt.Errorf("%w: a Request has a Source or a Stream, not both", ErrBadRequest)
	}
	inputs, err := r.checkInputs(req)
	if err != nil {
		return nil, err
	}
	var request []byte
	if req.Stream == nil { // a streamed program is encoded once it has arrived
		if request, err = r.encodeExecute(req, req.Source, inputs, false); err != nil {
			return nil, err
		}
	}
	for _, limit := range []time.Duration{req.Timeout, r.opts.Timeout} {
		if limit > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, limit)
			defer cancel()
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.closing, cancel)() // Close stops runs in flight

	st := newRunState(r, ctx, req.EarlyReads || req.Stream != nil)
	defer st.close()
	inst, err := r.acquire(st.ctx)
	if err != nil {
		return nil, r.runError(ctx, err)
	}
	guestCtx := inst.begin(st.ctx)
	if req.Stream != nil {
		var source string
		if source, err = r.readStream(guestCtx, inst, req.Stream, inputs); err == nil {
			request, err = r.encodeExecute(req, source, inputs, true)
		}
	}
	var response []byte
	if err == nil {
		response, err = inst.execute(guestCtx, request, r.maxResponse(req))
	}
	defer func() { r.giveBack(inst, err == nil && ctx.Err() == nil) }()
	out := &Output{
		Stdout:          inst.stdout.String(),
		Stderr:          inst.stderr.String(),
		StdoutTruncated: inst.stdout.truncated,
		StderrTruncated: inst.stderr.truncated,
		ToolCalls:       st.calls,
	}
	if err != nil || ctx.Err() != nil {
		// A context that ended during the run cut it short (a sleep, a tool),
		// whatever the Guest answered.
		return out, r.runError(ctx, err)
	}
	var decoded struct {
		Value       json.RawMessage `json:"value"`
		Error       *PythonError    `json:"error"`
		Transformed string          `json:"transformed"`
	}
	if err = json.Unmarshal(response, &decoded); err != nil {
		return out, fmt.Errorf("%w: bad execute response: %v", ErrGuest, err)
	}
	out.Transformed = decoded.Transformed
	if decoded.Error != nil {
		return out, decoded.Error
	}
	if len(decoded.Value) == 0 {
		decoded.Value = json.RawMessage("null")
	}
	if len(decoded.Value) > r.opts.MaxResult {
		return out, fmt.Errorf("%w: result is %d bytes, over the %d-byte limit", ErrTooLarge, len(decoded.Value), r.opts.MaxResult)
	}
	out.Value = decoded.Value
	return out, nil
}

// maxErrorResponse is room in an execute response for an error's message and
// traceback, which the Guest cuts to 64 KiB each.
const maxErrorResponse = 256 << 10

func (r *Runner) begin() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	r.runs.Add(1)
	r.runsStarted.Add(1)
	return nil
}

// runError names why a run stopped: the Runner closing, its context, or the Guest.
func (r *Runner) runError(ctx context.Context, err error) error {
	if r.closing.Err() != nil {
		return ErrClosed
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("spine: run stopped: %w", ctxErr)
	}
	if perr := programFailure(err); perr != nil {
		return perr
	}
	var readErr *streamReadError
	if errors.Is(err, ErrGuest) || errors.Is(err, ErrArtifact) || errors.Is(err, ErrTooLarge) || errors.As(err, &readErr) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrGuest, err)
}

// programFailure returns the Python error for a Guest that stopped outside
// Python because of what its program did, or nil: os._exit ends the
// interpreter (natively, the process) with the program's exit code, and
// recursion past the Guest's stack (possible once the program raised
// sys.setrecursionlimit) traps, where native CPython would crash; and a
// Guest that gave no response failed while reporting the program's outcome.
// In each case the program, not the Guest, failed, and the Guest is discarded.
func programFailure(err error) *PythonError {
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		return &PythonError{Type: "SystemExit", Message: fmt.Sprintf("the program called os._exit(%d)", exit.ExitCode())}
	}
	var noResponse *noResponseError
	if errors.As(err, &noResponse) {
		msg := "the program left the Guest unable to report its outcome"
		if last := noResponse.lastLine(); last != "" {
			msg += " (its last error: " + last + ")"
		}
		return &PythonError{Type: "RuntimeError", Message: msg}
	}
	if err != nil && !errors.Is(err, ErrGuest) && strings.Contains(err.Error(), "stack overflow") {
		return &PythonError{Type: "RecursionError", Message: "maximum recursion depth exceeded: the program overflowed the Guest's stack"}
	}
	return nil
}

type executeRequest struct {
	Source      string          `json:"source"`
	Filename    string          `json:"filename,omitempty"`
	Inputs      json.RawMessage `json:"inputs"`
	Tools       json.RawMessage `json:"tools,omitempty"` // omitted: the Guest's image has them installed
	EarlyReads  bool            `json:"early_reads"`
	Transformed bool            `json:"transformed,omitempty"`
	Prefix      bool            `json:"prefix,omitempty"`
	ResultLimit int             `json:"result_limit"`
}

// checkInputs checks req's source and inputs against the limits and returns
// the encoded inputs.
func (r *Runner) checkInputs(req Request) (json.RawMessage, error) {
	if len(req.Source) > r.opts.MaxSource {
		return nil, fmt.Errorf("%w: source is %d bytes, over the %d-byte limit", ErrTooLarge, len(req.Source), r.opts.MaxSource)
	}
	inputs, err := encodeInputs(req.Inputs)
	if err != nil {
		return nil, err
	}
	if len(inputs) > r.opts.MaxInputs {
		return nil, fmt.Errorf("%w: inputs are %d bytes, over the %d-byte limit", ErrTooLarge, len(inputs), r.opts.MaxInputs)
	}
	if depth := jsonDepth(inputs, MaxInputDepth); depth > MaxInputDepth {
		return nil, fmt.Errorf("%w: inputs nest more than %d levels deep, over the limit of %d", ErrBadRequest, MaxInputDepth, MaxInputDepth)
	}
	return inputs, nil
}

// MaxInputDepth is how deeply a Request's inputs may nest arrays and objects
// (the inputs object itself is level 1). The Guest decodes inputs with
// CPython's json module, whose recursion limit stops it a little under 600
// levels; the Host refuses deeper inputs before the run.
const MaxInputDepth = 512

// jsonDepth returns how deeply data (valid JSON) nests arrays and objects, or
// limit+1 as soon as it is deeper than limit.
func jsonDepth(data []byte, limit int) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > deepest {
				if deepest = depth; deepest > limit {
					return deepest
				}
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// encodeExecute encodes the Guest's execute request; prefix says the program
// was streamed in and its prepared reads are waiting.
func (r *Runner) encodeExecute(req Request, source string, inputs json.RawMessage, prefix bool) ([]byte, error) {
	return json.Marshal(executeRequest{
		Source:      source,
		Filename:    req.Filename,
		Inputs:      inputs,
		Tools:       r.guestTools(),
		EarlyReads:  req.EarlyReads || prefix,
		Transformed: req.Transformed,
		Prefix:      prefix,
		ResultLimit: r.opts.MaxResult,
	})
}

// guestTools is the tool list to send the Guest with a request: none when runs
// start from the image, whose Guest has the Runner's tools installed already.
func (r *Runner) guestTools() json.RawMessage {
	if r.image != nil {
		return nil
	}
	return r.tools
}

// maxResponse is the largest execute response the Host accepts for req.
func (r *Runner) maxResponse(req Request) int {
	n := r.opts.MaxResult + maxErrorResponse
	if req.Transformed {
		n += 2 * r.opts.MaxSource // the rewritten source, JSON-escaped
	}
	return n
}

func encodeInputs(inputs any) (json.RawMessage, error) {
	var encoded []byte
	switch v := inputs.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		if !json.Valid(v) {
			return nil, fmt.Errorf("%w: inputs are not valid JSON", ErrBadRequest)
		}
		encoded = v
	default:
		var err error
		if encoded, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("%w: inputs are not JSON-encodable: %w", ErrBadRequest, err)
		}
	}
	encoded = bytes.TrimSpace(encoded)
	if len(encoded) == 0 || encoded[0] != '{' {
		return nil, fmt.Errorf("%w: inputs must encode to a JSON object", ErrBadRequest)
	}
	return encoded, nil
}

// Stats is a snapshot of a Runner's counters, for metrics.
type Stats struct {
	Runs          int64     // runs started
	InstancesMade int64     // Guests instantiated (the image's and the pool's included)
	PoolSize      int       // the pool's target size; 0 without a pool
	PoolReady     int       // Guests waiting in the pool now
	Start         StartMode // how runs start (never StartAuto)
}

// Stats returns the Runner's counters.
func (r *Runner) Stats() Stats {
	s := Stats{Runs: r.runsStarted.Load(), InstancesMade: r.instancesMade.Load(), Start: r.mode}
	if r.pool != nil {
		s.PoolSize, s.PoolReady = cap(r.pool.ready), len(r.pool.ready)
	}
	return s
}

// Close stops every run in flight, waits for them, and releases the compiled
// Guest, the pool, the image and everything else the Runner holds. It is safe
// to call more than once.
func (r *Runner) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.stop()
	r.runs.Wait() // a run's Guest stops at once: its context is done
	if r.pool != nil {
		r.pool.close()
	}
	var err error
	if r.runtime != nil {
		err = r.runtime.Close(ctx)
	}
	r.image.close()
	if r.cache != nil {
		if cacheErr := r.cache.Close(ctx); err == nil {
			err = cacheErr
		}
	}
	return err
}
