// Package spine runs untrusted Python programs inside CPython compiled to
// WebAssembly (WASI), executed in-process by wazero. A program reaches the world
// only through the Go functions ("tools") of a Manifest, called like Python
// functions with keyword arguments.
package spine

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/sys"
	"go.opentelemetry.io/otel/trace"

	"github.com/spine-run/spine/guest"
	"github.com/spine-run/spine/internal/abi"
	"github.com/spine-run/spine/internal/engine"
	"github.com/spine-run/spine/internal/scratch"
)

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

	// Tools are tools of this run only, beside the Runner's Manifest: a
	// program calls them as it calls the Runner's, with the same stubs,
	// argument checks and early reads (AllowEarlyRead). Where the answer
	// comes from is the ToolSpec's business: a tool of another process, say,
	// whose Call sends the request away and waits for the answer
	// (docs/go.md, "Tools the caller answers"). A name the Runner's Manifest
	// has, or one that is a namespace of one of its tools or the reverse, is
	// refused (ErrBadRequest, naming it). The prepared image is the Runner's
	// whatever a run's tools: they are installed as the run starts.
	Tools Manifest

	// Waiting, when set, is called on the run's goroutine each time the
	// program starts waiting for the answer of a call of one of Tools: one it
	// makes, or an early read it claims before the read has finished. While
	// the program waits it starts no more calls; so once calls 1 to
	// ToolWait.Started have reached their tools' Call, every call the
	// program can make before the answer is known: a tool whose answers come
	// from elsewhere asks for them all at once (spine serve's client tools,
	// docs/http.md).
	Waiting func(ToolWait)

	// Approval decides the calls Options.Approve defers to a person
	// (ErrAsk): the program waits in its call, holding its Guest, until it
	// returns (ApprovalFunc). nil: a deferred call is refused, saying that
	// the run has no one to ask.
	Approval ApprovalFunc

	// Files are placed in the program's working directory before it runs
	// (CheckFiles says which are allowed). They are the run's own: gone when
	// it ends, like everything the program writes there.
	Files []File

	// Stdout and Stderr, when set, get the program's output as it runs
	// (the Guest's stdio is unbuffered: a print arrives as it is made, in
	// as few Writes as the writer keeps up with), all of it: MaxOutput caps
	// only the copy in Output. Writes come from a goroutine of the run's own,
	// in order; Run returns once the writer has taken everything, or when
	// the run's ctx ends, which drops what is left (a Write in progress may
	// return after Run; none starts after). A writer slower than the program
	// makes it wait, within its time limit. The first error a writer returns
	// stops forwarding to it for the rest of the run; the run goes on.
	Stdout io.Writer
	Stderr io.Writer

	// Record asks for the run's Record in Output.Record: everything its
	// outcome depends on, from which Runner.Replay runs it again, byte for
	// byte, calling no tool (docs/sandbox.md, "Records").
	Record bool

	replay  *replayer // set by Replay and Continue: the run answers from a record
	session *Session  // set by Session.Continue: the session the run goes on in
}

// ToolWait is what Request.Waiting is told when the program waits for a
// call of one of the run's own tools.
type ToolWait struct {
	// Call is the number of the call the program waits for (ToolCallOf),
	// Started how many calls of the run's own tools the run has started so
	// far, early reads included.
	Call, Started int
	// Stdout and Stderr are the program's output so far, as Output has them
	// (within Options.MaxOutput).
	Stdout, Stderr string
	// Record is the run's record so far, when it is recorded
	// (Request.Record): everything up to this wait, the call waited for not
	// included, without an Outcome. Runner.Continue carries the run on from
	// it, in this process or another, to this same wait.
	Record *Record
}

// Output is what a run produced.
type Output struct {
	// Value is the JSON encoding of the program's global result, or of its last
	// top-level expression when it never set result; "null" when neither, or
	// when the value has no faithful JSON form (a DataFrame, an object of the
	// program's class, NaN: docs/python.md says what each type becomes).
	Value json.RawMessage

	// Display is the same value as a notebook shows it, its Out[ ]: nil when
	// the value is None, else its text/plain and the other formats it offers.
	Display Display

	// Displayed are what the program passed to display(), in order, each as
	// a notebook shows it (set also when the run failed afterwards).
	// DisplayedLeftOut counts the ones left out past Options.MaxResult.
	Displayed        []Display
	DisplayedLeftOut int

	// Stdout and Stderr are the captured output, each kept up to
	// Options.MaxOutput bytes; the Truncated flags say whether more was written.
	Stdout          string
	Stderr          string
	StdoutTruncated bool
	StderrTruncated bool

	// ToolCalls is how many tool calls the program made.
	ToolCalls int

	// Calls are the program's tool calls in the order it made them (at most
	// Options.MaxToolCalls). Early reads the program never claimed are not
	// among them, except those whose response reached the Guest (for a
	// chained read): they are there too, marked Unclaimed.
	Calls []ToolCall

	// Transformed is the program as it ran, rewritten by the PLM pass, when
	// Request.Transformed asked for it.
	Transformed string

	// Files are the files the program created or changed in its working
	// directory, by name, as they were when it ended (Request.Files it left
	// untouched are not among them). FilesLeftOut counts the files left out
	// because they would take Files past Options.MaxFiles or MaxFileBytes.
	Files        []File
	FilesLeftOut int

	// Record is the run's Record, when Request.Record asked for one (set
	// also when the run failed, once it started).
	Record *Record
}

// Runner runs programs against one Manifest. It is safe for concurrent use;
// every Run gets its own clean Guest.
type Runner struct {
	manifest Manifest
	opts     Options
	tools    json.RawMessage // the manifest as the Guest sees it, encoded once

	runToolCache guestToolCache // the Guest's form of the tools runs bring (Request.Tools)
	sessionDir   *sessionDir    // this Runner's folder in SessionOptions.Dir (session_dir.go); nil without one
	world        world          // the package archives and the warm-up
	engine       *engine.Engine // the Guests: compiled, imaged, pooled
	identity     snapshotIdentity
	guest        RecordGuest // the Guest build, as records name it
	sessions     *sessions
	tracer       trace.Tracer // nil: no spans
	log          *slog.Logger // nil: no log

	runsStarted atomic.Int64
	closing     context.Context // done once Close begins: runs in flight stop
	stop        context.CancelFunc
	mu          sync.Mutex
	closed      bool
	runs        sync.WaitGroup

	noWake bool // tests: never wake the Guest for chained reads
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
	if opts.Sessions.MemoryLimit < 64<<20 {
		return nil, fmt.Errorf("spine: Sessions.MemoryLimit %d is under the 64 MiB CPython needs", opts.Sessions.MemoryLimit)
	}
	artifact := Artifact{Wasm: guest.Wasm, StdlibZip: guest.StdlibZip}
	if opts.Artifact != nil {
		artifact = *opts.Artifact
	}

	r := &Runner{manifest: m, opts: opts, tools: encodeGuestTools(m), sessions: newSessions(opts.Sessions), log: opts.Logger}
	if opts.TracerProvider != nil {
		r.tracer = opts.TracerProvider.Tracer(instrumentation)
	}
	r.closing, r.stop = context.WithCancel(context.Background())
	var site []byte
	if opts.Packages != nil {
		if site, err = packPackages(opts.Packages); err != nil {
			r.stop()
			return nil, err
		}
	}
	preload, err := checkPreload(append(append([]string(nil), artifact.Preload...), opts.Preload...))
	if err != nil {
		r.stop()
		return nil, err
	}
	r.world = newWorld(artifact, site, preload)
	id := artifactID(artifact)
	key := imageKey(id, r.world.digest, r.tools)
	r.identity = newSnapshotIdentity(id, r.tools, key)
	r.guest = RecordGuest{Artifact: artifactName(id), Image: key}
	r.engine, err = engine.New(ctx, engine.Config{
		Wasm:           artifact.Wasm,
		StdlibZip:      artifact.StdlibZip,
		Packages:       r.world.files,
		ImageKey:       key,
		ArtifactID:     artifactName(id),
		MemoryLimit:    opts.MemoryLimit,
		MaxOutput:      opts.MaxOutput,
		MaxDescriptors: opts.MaxDescriptors,
		Scratch:        scratch.Limits{MaxBytes: opts.ScratchSize, MaxEntries: opts.MaxScratchEntries},
		PoolSize:       opts.PoolSize,
		Start:          engine.StartFrom(ctx),
		CacheDir:       opts.CacheDir,
		NoDiskCache:    opts.NoDiskCache,
		SeedCacheDir:   opts.SeedCacheDir,
		Logger:         cmp.Or(opts.SetupLogger, opts.Logger),
		Bridge:         abi.Host{Call: r.hostCall, Prepare: r.hostPrepare, Resolve: r.hostResolve, Peek: r.hostPeek},
		Warm:           r.warm,
	})
	if err != nil {
		r.stop()
		if pe := (*preloadError)(nil); errors.As(err, &pe) {
			return nil, pe // a fault of Preload, not of preparing the image
		}
		return nil, err
	}
	if opts.Sessions.Dir != "" {
		if r.sessionDir, err = openSessionDir(opts.Sessions.Dir); err != nil {
			r.stop()
			r.engine.Close(ctx)
			return nil, err
		}
	}
	r.sessions.startSweeper(r.closing)
	return r, nil
}

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

// artifactName is the artifact's name in the cache folder: the hash of its
// artifactID.
func artifactName(id []byte) string {
	sum := sha256.Sum256(id)
	return hex.EncodeToString(sum[:])
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
	return r.run(ctx, req, nil)
}

// run runs one program on a Guest from the pool, or on session s's Guest.
func (r *Runner) run(ctx context.Context, req Request, s *Session) (out *Output, err error) {
	if s == nil {
		s = req.session // Session.Continue's, through Runner.Continue
	}
	if r.tracer != nil || r.log != nil {
		var span trace.Span
		ctx, span = startRun(ctx, r.tracer, req, s != nil)
		begun := time.Now()
		if r.log != nil {
			r.log.LogAttrs(ctx, slog.LevelDebug, "spine: run started", slog.Bool("session", s != nil))
		}
		defer func() { endRun(r.log, span, begun, out, err) }()
	}
	return r.execute(ctx, req, s)
}

// checkRequest refuses a request execute cannot run, before it takes a
// Guest: it returns the inputs encoded, and the run's own tools as the Guest
// takes them, req.Tools made the checked copy.
func (r *Runner) checkRequest(req *Request) (inputs json.RawMessage, extra guestRunTools, err error) {
	if req.Stream != nil && req.Source != "" {
		return nil, extra, fmt.Errorf("%w: a Request has a Source or a Stream, not both", ErrBadRequest)
	}
	if len(req.Source) > r.opts.MaxSource {
		return nil, extra, sourceTooLarge(len(req.Source), r.opts.MaxSource)
	}
	if inputs, err = r.CheckInputs(req.Inputs); err != nil {
		return nil, extra, err
	}
	if err := r.CheckFiles(req.Files); err != nil {
		return nil, extra, err
	}
	req.Tools, extra, err = r.runTools(req.Tools)
	return inputs, extra, err
}

// execute is run's work.
func (r *Runner) execute(ctx context.Context, req Request, s *Session) (_ *Output, outErr error) {
	inputs, extra, err := r.checkRequest(&req)
	if err != nil {
		return nil, err
	}
	session := s != nil
	var request []byte
	if req.Stream == nil { // a streamed program is encoded once it has arrived
		if request, err = r.encodeExecute(req, req.Source, inputs, extra, false, session); err != nil {
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
	if closer, ok := req.Stream.(io.Closer); ok {
		// A run ctx ended, wherever it was (waiting for a Guest, reading the
		// stream, running), closes the stream so that its writer is not left
		// blocked. In the background: closing some readers (an HTTP request
		// body) waits for a Read in progress.
		defer func() {
			if ctx.Err() != nil {
				go closer.Close()
			}
		}()
	}

	st := newRunState(r, ctx, (req.EarlyReads || req.Stream != nil) && (req.replay == nil || req.replay.resumes()))
	st.tools, st.waiting, st.approval, st.stop = req.Tools, req.Waiting, req.Approval, cancel
	st.boundary(&req, inputs, s)
	defer st.close()
	var inst *engine.Instance
	if session {
		inst, err = s.guest(st.ctx)
	} else {
		inst, err = r.engine.Acquire(st.ctx)
	}
	if err != nil {
		return nil, r.runError(ctx, err)
	}
	st.output = inst.Output
	st.use(inst)
	// The Guest goes back when the run is over. clean says it may serve
	// another run, set once its run has ended and its answer is read; cause
	// is the error its run ended with, for a session whose Guest broke.
	var clean bool
	var cause error
	defer func() {
		inst.End()
		if session {
			s.runEnded(inst.Failed(), cause)
		} else {
			r.engine.Release(inst, clean)
		}
	}()
	var wake *atomic.Bool
	if st.early && !r.noWake {
		wake = &st.wake
	}
	guestCtx := inst.Begin(st.ctx, wake)
	stopForwarding := forward(ctx, inst, req)
	err = placeFiles(inst, req.Files)
	tooLarge := false // a stream over MaxSource: Run answers as for that source sent whole
	if err == nil && req.Stream != nil {
		var source string
		if source, err = r.readStream(guestCtx, inst, req.Stream, inputs, extra, session); err == nil {
			request, err = r.encodeExecute(req, source, inputs, extra, true, session)
			st.rec.program(r, &req, source, inputs) // a streamed program, once it has arrived
		} else {
			tooLarge = errors.Is(err, ErrTooLarge)
		}
	}
	var response []byte
	if err == nil {
		response, err = inst.Execute(guestCtx, request, r.opts.maxResponse(req.Transformed))
	}
	stopForwarding() // before the Guest goes back: the writers have had everything
	cause = err
	if tooLarge && ctx.Err() == nil {
		return nil, err
	}
	st.recordUnclaimed()
	out := &Output{ToolCalls: st.calls, Calls: st.record}
	if st.rec != nil {
		defer func() { out.Record = st.rec.finish(out, outErr) }()
	}
	out.Stdout, out.Stderr, out.StdoutTruncated, out.StderrTruncated = inst.Output()
	out.Files, out.FilesLeftOut = outputFiles(inst, &r.opts)
	if err != nil || ctx.Err() != nil {
		// A context that ended during the run cut it short (a sleep, a tool),
		// whatever the Guest answered.
		return out, r.runError(ctx, err)
	}
	var decoded executeResponse
	if err := json.Unmarshal(response, &decoded); err != nil {
		return out, fmt.Errorf("%w: bad execute response: %v", ErrGuest, err)
	}
	clean = true
	out.Transformed = decoded.Transformed
	out.Displayed, out.DisplayedLeftOut = decoded.Displayed, decoded.DisplayedLeftOut
	if decoded.Error != nil {
		return out, decoded.Error
	}
	if len(decoded.Value) == 0 {
		decoded.Value = json.RawMessage("null")
	}
	if len(decoded.Value) > r.opts.MaxResult {
		return out, fmt.Errorf("%w: result is %d bytes, over the %d-byte limit", ErrTooLarge, len(decoded.Value), r.opts.MaxResult)
	}
	out.Value, out.Display = decoded.Value, decoded.Display
	return out, nil
}

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
	if errors.As(err, &readErr) {
		return err
	}
	for _, known := range []error{ErrGuest, ErrArtifact, ErrTooLarge, ErrTooManySessions, ErrSessionLost, ErrSnapshot, ErrSnapshotMismatch} {
		if errors.Is(err, known) {
			return err
		}
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
	var noResponse *engine.NoResponseError
	if errors.As(err, &noResponse) {
		msg := "the program left the Guest unable to report its outcome"
		if last := noResponse.LastLine(); last != "" {
			msg += " (its last error: " + last + ")"
		}
		return &PythonError{Type: "RuntimeError", Message: msg}
	}
	if err != nil && !errors.Is(err, ErrGuest) && strings.Contains(err.Error(), "stack overflow") {
		return &PythonError{Type: "RecursionError", Message: "maximum recursion depth exceeded: the program overflowed the Guest's stack"}
	}
	return nil
}

// CheckInputs validates inputs as Run does and returns them encoded: they
// must encode to a JSON object (nil, an empty json.RawMessage and JSON null
// mean {}), within MaxInputs bytes and MaxInputDepth levels. The error
// matches ErrBadRequest or ErrTooLarge. The CLI, the service and the MCP
// server call it to refuse a bad request before they take a slot for it.
func (r *Runner) CheckInputs(inputs any) (json.RawMessage, error) {
	encoded, err := encodeInputs(inputs)
	if err != nil {
		return nil, err
	}
	if len(encoded) > r.opts.MaxInputs {
		return nil, fmt.Errorf("%w: inputs are %d bytes, over the %d-byte limit", ErrTooLarge, len(encoded), r.opts.MaxInputs)
	}
	if err := checkInputText(encoded); err != nil {
		return nil, err
	}
	return encoded, nil
}

// encodeExecute encodes the Guest's execute request; extra is the run's own
// tools as the Guest takes them (Request.Tools), prefix says the program was
// streamed in and its prepared reads are waiting, session that it runs in
// its session's namespace.
func (r *Runner) encodeExecute(req Request, source string, inputs json.RawMessage, extra guestRunTools, prefix, session bool) ([]byte, error) {
	return json.Marshal(executeRequest{
		Source:      source,
		Filename:    req.Filename,
		Inputs:      inputs,
		Tools:       r.requestTools(),
		ExtraTools:  extra.whole,
		LazyTools:   extra.lazy,
		EarlyReads:  req.EarlyReads || prefix,
		Transformed: req.Transformed,
		Prefix:      prefix,
		Session:     session,
		ResultLimit: r.opts.MaxResult,
	})
}

// requestTools is the tool list to send the Guest with a request: none when runs
// start from the image, whose Guest has the Runner's tools installed already.
func (r *Runner) requestTools() json.RawMessage {
	if r.engine.HasImage() {
		return nil
	}
	return r.tools
}

func encodeInputs(inputs any) (json.RawMessage, error) {
	var encoded []byte
	switch v := inputs.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		if t := bytes.TrimSpace(v); len(t) == 0 || string(t) == "null" {
			return json.RawMessage("{}"), nil
		}
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
	Runs          int64  // runs started
	InstancesMade int64  // Guests instantiated (the image's and the pool's included)
	PoolSize      int    // the pool's target size; 0 without a pool
	PoolReady     int    // Guests waiting in the pool now
	Start         string // how runs start: "cow", "copy" or "fresh" (experimental.WithStart)
}

// Stats returns the Runner's counters.
func (r *Runner) Stats() Stats {
	e := r.engine.Stats()
	return Stats{Runs: r.runsStarted.Load(), InstancesMade: e.InstancesMade, PoolSize: e.PoolSize, PoolReady: e.PoolReady, Start: e.Start.String()}
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
	r.sessions.closeAll(ErrClosed)
	r.sessionDir.close()
	return r.engine.Close(ctx)
}
