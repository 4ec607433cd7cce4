package spine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation is the name a Runner's tracer is known by.
const instrumentation = "github.com/spine-run/spine"

// startRun starts the span of a run, when there is a tracer.
func startRun(ctx context.Context, tracer trace.Tracer, req Request, session bool) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	return tracer.Start(ctx, "spine.run", trace.WithAttributes(
		attribute.Bool("spine.early_reads", req.EarlyReads || req.Stream != nil),
		attribute.Bool("spine.session", session),
	))
}

// endRun ends a run's span and logs its end to log (nil: none).
func endRun(log *slog.Logger, span trace.Span, begun time.Time, out *Output, err error) {
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
	if log == nil {
		return
	}
	attrs := []slog.Attr{slog.Duration("duration", time.Since(begun))}
	if out != nil {
		attrs = append(attrs, slog.Int("tool_calls", out.ToolCalls))
		if out.StdoutTruncated {
			log.LogAttrs(context.Background(), slog.LevelWarn, "spine: limit reached", slog.String("limit", "MaxOutput"), slog.String("stream", "stdout"))
		}
		if out.StderrTruncated {
			log.LogAttrs(context.Background(), slog.LevelWarn, "spine: limit reached", slog.String("limit", "MaxOutput"), slog.String("stream", "stderr"))
		}
	}
	switch {
	case errors.Is(err, ErrTooLarge):
		log.LogAttrs(context.Background(), slog.LevelWarn, "spine: limit reached", slog.String("error", err.Error()))
	case errors.Is(err, context.DeadlineExceeded):
		log.LogAttrs(context.Background(), slog.LevelWarn, "spine: limit reached", slog.String("limit", "time"))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	log.LogAttrs(context.Background(), slog.LevelInfo, "spine: run ended", attrs...)
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
