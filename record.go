package spine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/klauspost/compress/zstd"
)

// RecordVersion is the version of the record format this Spine writes, and
// the only one it replays (docs/sandbox.md, "Records").
const RecordVersion = 1

// Record is everything a run's outcome depends on, as it crossed the
// boundary between the Host and the Guest: the Guest's build, the program,
// its inputs and files, each tool call's request and the response the Guest
// got, in the program's order, and every clock read and random byte the
// Guest took. Runner.Replay runs the program again from it, byte for byte,
// calling no tool. Request.Record asks for one (Output.Record); Encode and
// ParseRecord write and read it.
//
// A record holds nothing the run did not hold: the program, its inputs,
// files and tool results are in it, as they were in the run.
type Record struct {
	// Version is RecordVersion.
	Version int `json:"spine_record"`

	// Guest identifies the build the run ran on: the artifact, and the
	// image it started from (the artifact, packages, preloads and tools).
	Guest RecordGuest `json:"guest"`

	// Session is set for a session's run: it started from the session's
	// state, which the record does not hold.
	Session *RecordSession `json:"session,omitempty"`

	// The program as it ran: Prefix says it was streamed in (prefix mode);
	// a replay runs it whole, with early reads on, which answers the same.
	Source     string          `json:"source"`
	Filename   string          `json:"filename,omitempty"`
	Inputs     json.RawMessage `json:"inputs"`
	Files      []File          `json:"files,omitempty"`
	EarlyReads bool            `json:"early_reads,omitempty"`
	Prefix     bool            `json:"prefix,omitempty"`

	// Tools are the Runner's tools as the Guest saw them, RunTools the
	// run's own (Request.Tools), by name.
	Tools    []RecordedTool `json:"tools"`
	RunTools []RecordedTool `json:"run_tools,omitempty"`

	// Calls are the program's tool calls in its order, with the early
	// reads whose value reached the Guest and that no call claimed
	// (Unclaimed), where the Host saw them.
	Calls []RecordedCall `json:"calls"`

	// Clock and Random are what WASI gave the Guest: its clock reads and
	// random bytes (random_get's, concatenated).
	Clock  RecordClock `json:"clock"`
	Random []byte      `json:"random,omitempty"`

	// Outcome is the run's outcome, as digests: a replay must answer the same.
	Outcome RecordOutcome `json:"outcome"`

	// Waiting is set on a record taken where the run waited for one of its
	// own tools (ToolWait.Record): the calls it had started and not claimed
	// there, which Runner.Continue takes up again.
	Waiting *RecordWait `json:"waiting,omitempty"`

	// Asking is set on a record taken where the run waited for a decision
	// on a call Options.Approve deferred (ApprovalCall.Record): that call.
	// Runner.Continue asks Request.Approval about it again, as the first
	// call past the record, without asking Options.Approve: a person's
	// decision stands whatever the continuing Runner's hook says.
	Asking *RecordAsking `json:"asking,omitempty"`

	// Incomplete says why the record stops short (Options.MaxRecord): it
	// describes the run, but cannot replay it.
	Incomplete string `json:"incomplete,omitempty"`
}

// RecordAsking is the call a run waited in for a person's decision
// (Record.Asking): its tool, arguments (canonical, as Approve judged them)
// and the reason Approve gave.
type RecordAsking struct {
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
	Reason string          `json:"reason"`
}

// RecordGuest identifies a Guest build: the artifact's name (the hash of
// its manifest) and the image key runs start from.
type RecordGuest struct {
	Artifact string `json:"artifact"`
	Image    string `json:"image"`
}

// RecordSession names the session state a session's run started from: the
// session, the image its snapshots apply to, and how many runs the session
// had made in this Runner before it.
type RecordSession struct {
	ID    string `json:"id"`
	Image string `json:"image"`
	Runs  int    `json:"runs"`
}

// RecordedTool is a tool as the Guest saw it: its ToolSpec without Call.
type RecordedTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	KeywordOnly  bool            `json:"keyword_only,omitempty"`
	Early        bool            `json:"early,omitempty"`
}

// RecordedCall is one tool call: the request the Guest made and the
// response it got, exactly ({"value": …} or {"error": …}).
type RecordedCall struct {
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	Response json.RawMessage `json:"response"`
	// Early says an early read answered it; Unclaimed, that it was an early
	// read no call of the program claimed (ToolCall.Unclaimed).
	Early     bool `json:"early,omitempty"`
	Unclaimed bool `json:"unclaimed,omitempty"`
	// Start and Duration are when the tool ran, from the start of the run.
	Start    time.Duration `json:"start_ns"`
	Duration time.Duration `json:"duration_ns"`
}

// RecordWait is where a record taken at a wait stops: the call of the
// run's own tools the program waits for (its number, ToolCallOf), how many
// calls of its own tools and early reads it had started, and the calls
// started and not claimed, in the order they started, the one waited for
// included.
type RecordWait struct {
	Call    int             `json:"call"`
	Started int             `json:"started"`
	Reads   int             `json:"reads,omitempty"`
	Pending []RecordedStart `json:"pending"`
}

// RecordedStart is a call a run started and had not claimed where it waited:
// an early read, or the program's call it waits in. N is its number among
// the calls of the run's own tools (0: a Runner's tool); Response is set
// when it had finished (a Runner's tool's is there only then).
type RecordedStart struct {
	N        int             `json:"n,omitempty"`
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	Early    bool            `json:"early,omitempty"`
	Response json.RawMessage `json:"response,omitempty"`
}

// Failed says the call raised in the program: its response is an error.
func (c RecordedCall) Failed() bool {
	var response struct {
		Error *string `json:"error"`
	}
	return json.Unmarshal(c.Response, &response) == nil && response.Error != nil
}

// refused says Options.Approve refused the call (PermissionError): it was
// not made, nor numbered among the calls of the run's own tools
// (ToolCallOf).
func (c RecordedCall) refused() bool {
	var response struct {
		Error *string `json:"error"`
		Type  string  `json:"type"`
	}
	return json.Unmarshal(c.Response, &response) == nil && response.Error != nil && response.Type == "PermissionError"
}

// RecordClock is the Guest's clock reads, in the order it made them: Wall
// (CLOCK_REALTIME, and the times of its files) and Mono (CLOCK_MONOTONIC),
// each in nanoseconds, the first read as it was and every later one as its
// difference from the read before (small numbers, a compact record).
type RecordClock struct {
	Wall []int64 `json:"wall,omitempty"`
	Mono []int64 `json:"mono,omitempty"`
}

// RecordOutcome is a run's outcome as SHA-256 digests (hex): its value,
// stdout, stderr, the files it left and its error ("" for none).
type RecordOutcome struct {
	Value  string `json:"value"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	Files  string `json:"files"`
	Error  string `json:"error,omitempty"`
}

// outcomeOf digests a run's outcome.
func outcomeOf(out *Output, err error) RecordOutcome {
	digest := func(b []byte) string {
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:])
	}
	h := sha256.New()
	for _, f := range out.Files {
		fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
	}
	o := RecordOutcome{Value: digest(out.Value), Stdout: digest([]byte(out.Stdout)), Stderr: digest([]byte(out.Stderr)),
		Files: hex.EncodeToString(h.Sum(nil))}
	if err != nil {
		o.Error = digest([]byte(err.Error()))
	}
	return o
}

// differs names the first part of o that other does not have, or "".
func (o RecordOutcome) differs(other RecordOutcome) string {
	switch {
	case o.Error != other.Error:
		return "error"
	case o.Value != other.Value:
		return "value"
	case o.Stdout != other.Stdout:
		return "stdout"
	case o.Stderr != other.Stderr:
		return "stderr"
	case o.Files != other.Files:
		return "files"
	}
	return ""
}

// recordedTools lists m's tools by name.
func recordedTools(m Manifest) []RecordedTool {
	names := slices.Sorted(maps.Keys(m))
	tools := make([]RecordedTool, 0, len(names))
	for _, name := range names {
		spec := m[name]
		tools = append(tools, RecordedTool{Name: name, Description: spec.Description, InputSchema: spec.InputSchema,
			OutputSchema: spec.OutputSchema, KeywordOnly: spec.KeywordOnly, Early: spec.AllowEarlyRead})
	}
	return tools
}

// errReplayOnly is what a tool of Record.Manifest answers: a replay never calls it.
var errReplayOnly = errors.New("spine: this tool stands for a recorded one: only a replay runs it, which calls no tool")

// Manifest is the record's Runner tools as a Manifest: their specs, each
// with a Call that only fails. A Runner made from it (New) has the Guest
// the run had, so it can replay the record where the tools themselves are
// not at hand (spine replay).
func (rec *Record) Manifest() Manifest {
	return manifestOf(rec.Tools)
}

func manifestOf(tools []RecordedTool) Manifest {
	m := make(Manifest, len(tools))
	fail := func(context.Context, json.RawMessage) (any, error) { return nil, errReplayOnly }
	for _, t := range tools {
		m[t.Name] = ToolSpec{Call: fail, AllowEarlyRead: t.Early, Description: t.Description, InputSchema: t.InputSchema,
			OutputSchema: t.OutputSchema, KeywordOnly: t.KeywordOnly}
	}
	return m
}

// compressAbove is the size past which Encode compresses a record.
const compressAbove = 64 << 10

// zstdMagic starts every zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Encode writes the record as JSON, compressed with zstd when it is over 64
// KiB. ParseRecord reads either.
func (rec *Record) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return nil, fmt.Errorf("spine: encoding the record: %w", err)
	}
	if buf.Len() <= compressAbove {
		return buf.Bytes(), nil
	}
	w, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer w.Close()
	return w.EncodeAll(buf.Bytes(), nil), nil
}

// maxRecordFile bounds what ParseRecord decompresses.
const maxRecordFile = 1 << 30

// ParseRecord reads a record Encode wrote (or its JSON, uncompressed). An
// error matches ErrBadRequest: not a record, or of another version.
func ParseRecord(data []byte) (*Record, error) {
	if bytes.HasPrefix(data, zstdMagic) {
		r, err := zstd.NewReader(bytes.NewReader(data), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxRecordFile))
		if err != nil {
			return nil, fmt.Errorf("%w: record: %v", ErrBadRequest, err)
		}
		defer r.Close()
		if data, err = io.ReadAll(io.LimitReader(r, maxRecordFile)); err != nil {
			return nil, fmt.Errorf("%w: record: %v", ErrBadRequest, err)
		}
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%w: not a record: %v", ErrBadRequest, err)
	}
	if rec.Version != RecordVersion {
		return nil, fmt.Errorf("%w: a record of version %d; this Spine reads version %d", ErrBadRequest, rec.Version, RecordVersion)
	}
	return &rec, nil
}

// CheckRecord says why the Runner cannot replay or continue rec (Replay,
// Continue), or nil: a record of another version, cut short by
// Options.MaxRecord or of a session's run (ErrBadRequest), of another Guest
// build or tools (ErrDiverged), whose run tools do not fit the Runner, or
// whose wait (Record.Waiting) this Runner could not have written (its
// Options.MaxPendingEarlyReads and MaxEarlyReads, say). It runs nothing; a
// record it accepts may still diverge as it runs.
func (r *Runner) CheckRecord(rec *Record) error {
	if err := r.replayable(rec); err != nil {
		return err
	}
	return r.checkWaiting(rec.Waiting, manifestOf(rec.RunTools))
}
