package spine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ToolCall is one tool call of a run, as Output.Calls records it.
type ToolCall struct {
	Tool string `json:"tool"`

	// Start is when the tool started, from the start of the run; Duration is
	// how long it ran. An early read starts before the program reaches the call.
	// In JSON both are nanoseconds.
	Start    time.Duration `json:"start_ns"`
	Duration time.Duration `json:"duration_ns"`

	// Early says the call was answered by an early read.
	Early bool `json:"early"`

	// Failed says the call raised in the program: the tool's error, a
	// refusal by Options.Approve, an unknown tool.
	Failed bool `json:"failed"`

	// Unclaimed says this was an early read whose response the Host handed
	// to the Guest (to start a chained read, docs/early-reads.md) but that no
	// call of the program claimed. It is on the record because its value
	// was in the Guest; it is not one of Output.ToolCalls.
	Unclaimed bool `json:"unclaimed,omitempty"`
}

// ApproveFunc decides whether a tool call may run: nil lets it, an error
// refuses it, and the program's call raises PermissionError with the error's
// message. args are the call's arguments as JSON (read-only), in the
// canonical form the tool then gets: escapes resolved, each object's keys in
// the program's order, no key repeated (a call that repeats one is refused
// before the hook is asked). early says the call is an early read the Host
// is about to start before the program reaches it (docs/observability.md: a
// refused early read is not started, and the program's call, if it comes,
// asks again). It runs on the Guest's
// goroutine: while it runs the program waits, and ctx ends with the run.
type ApproveFunc func(ctx context.Context, tool string, args json.RawMessage, early bool) error

// refusedError is a call Options.Approve refused: the program sees
// PermissionError.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// approve asks Options.Approve about request and returns the arguments the
// tool is to get: with a hook, the canonical form of request.Args (escapes
// resolved, canonicalArgs), which is what the hook judged; without one,
// request.Args as they came. Arguments with no canonical form (a key
// repeated) and a hook that panics refuse.
func (r *Runner) approve(ctx context.Context, request callRequest, early bool) (args json.RawMessage, err error) {
	hook := r.opts.Approve
	if hook == nil {
		return request.Args, nil
	}
	args, err = canonicalArgs(request.Args)
	if err != nil {
		return nil, &refusedError{"tool call refused: " + err.Error()}
	}
	defer func() {
		if p := recover(); p != nil {
			args, err = nil, &refusedError{fmt.Sprintf("the approval hook panicked: %v", p)}
		}
	}()
	if err := hook(ctx, request.Tool, args, early); err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "tool call refused"
		}
		return nil, &refusedError{msg}
	}
	return args, nil
}

// instrumentation is the name a Runner's tracer is known by.
const instrumentation = "github.com/spine-run/spine"

// startRun starts the span of a run, when the Runner traces.
func (r *Runner) startRun(ctx context.Context, req Request, session bool) (context.Context, trace.Span) {
	if r.tracer == nil {
		return ctx, nil
	}
	return r.tracer.Start(ctx, "spine.run", trace.WithAttributes(
		attribute.Bool("spine.early_reads", req.EarlyReads || req.Stream != nil),
		attribute.Bool("spine.session", session),
	))
}

// endRun ends a run's span and logs its end.
func (r *Runner) endRun(span trace.Span, begun time.Time, out *Output, err error) {
	if span != nil {
		if out != nil {
			span.SetAttributes(attribute.Int("spine.tool_calls", out.ToolCalls))
		}
		if err != nil {
			var perr *PythonError
			if errors.As(err, &perr) {
				span.SetAttributes(attribute.String("spine.python.exception", perr.Type))
			}
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	if r.log == nil {
		return
	}
	attrs := []slog.Attr{slog.Duration("duration", time.Since(begun))}
	if out != nil {
		attrs = append(attrs, slog.Int("tool_calls", out.ToolCalls))
		if out.StdoutTruncated {
			r.log.LogAttrs(context.Background(), slog.LevelWarn, "spine: limit reached", slog.String("limit", "MaxOutput"), slog.String("stream", "stdout"))
		}
		if out.StderrTruncated {
			r.log.LogAttrs(context.Background(), slog.LevelWarn, "spine: limit reached", slog.String("limit", "MaxOutput"), slog.String("stream", "stderr"))
		}
	}
	switch {
	case errors.Is(err, ErrTooLarge):
		r.log.LogAttrs(context.Background(), slog.LevelWarn, "spine: limit reached", slog.String("error", err.Error()))
	case errors.Is(err, context.DeadlineExceeded):
		r.log.LogAttrs(context.Background(), slog.LevelWarn, "spine: limit reached", slog.String("limit", "time"))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	r.log.LogAttrs(context.Background(), slog.LevelInfo, "spine: run ended", attrs...)
}

// startTool starts the span of one tool call, when the run is traced.
func (st *runState) startTool(ctx context.Context, tool string, early bool) (context.Context, trace.Span) {
	if st.runner.tracer == nil {
		return ctx, nil
	}
	return st.runner.tracer.Start(ctx, "execute_tool "+tool, trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", tool),
		attribute.Bool("spine.early_read", early),
	))
}

// toolFailed marks a tool span failed.
func toolFailed(span trace.Span, err error) {
	if span == nil || err == nil {
		return
	}
	var refused *refusedError
	if errors.As(err, &refused) {
		span.SetAttributes(attribute.Bool("spine.refused", true))
	}
	span.SetStatus(codes.Error, err.Error())
}

// called records a call the program made in Output.Calls (at most
// MaxToolCalls: every recorded call spent one), and logs its failure.
func (st *runState) called(tool string, start time.Time, took time.Duration, early bool, err error) {
	if len(st.record) < st.runner.opts.MaxToolCalls {
		st.record = append(st.record, ToolCall{Tool: tool, Start: start.Sub(st.begun), Duration: took, Early: early, Failed: err != nil})
	}
	if err != nil && st.runner.log != nil {
		msg := "spine: tool failed"
		var refused *refusedError
		if errors.As(err, &refused) {
			msg = "spine: tool call refused"
		}
		st.runner.log.LogAttrs(st.ctx, slog.LevelInfo, msg, slog.String("tool", tool), slog.Bool("early", early), slog.String("error", err.Error()))
	}
}

// limitOnce logs the first time a run reaches a per-run limit.
func (st *runState) limitOnce(seen *bool, limit string) {
	if st.runner.log == nil || *seen {
		return
	}
	*seen = true
	st.runner.log.LogAttrs(st.ctx, slog.LevelWarn, "spine: limit reached", slog.String("limit", limit))
}
