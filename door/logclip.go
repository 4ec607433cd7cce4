package door

import (
	"context"
	"fmt"
	"log/slog"
	"unicode/utf8"
)

// MaxLogText is how many bytes of a text ClipLogs lets through: past it a
// text is cut and ends with "… (N bytes)", N being its whole length.
const MaxLogText = 200

// ClipLogs returns a handler that passes every record on to h with its
// message and each of its values cut to MaxLogText bytes: strings, errors,
// byte slices, Stringers and anything else longer than that once formatted,
// in groups too. A program's output, traceback or error message can be a
// mebibyte, and a log is not the place to keep it; the answer of the run has
// it whole. service.Server logs through it; give it the logger of anything else
// that may log what programs wrote.
func ClipLogs(h slog.Handler) slog.Handler {
	if c, ok := h.(clipHandler); ok {
		return c
	}
	return clipHandler{h}
}

type clipHandler struct{ h slog.Handler }

func (c clipHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return c.h.Enabled(ctx, level)
}

func (c clipHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Clip(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(clipAttr(a))
		return true
	})
	return c.h.Handle(ctx, out)
}

func (c clipHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return clipHandler{c.h.WithAttrs(clipAttrs(attrs))}
}

func (c clipHandler) WithGroup(name string) slog.Handler {
	return clipHandler{c.h.WithGroup(name)}
}

func clipAttrs(attrs []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = clipAttr(a)
	}
	return out
}

func clipAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Clip(v.String()))
	case slog.KindGroup:
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(clipAttrs(v.Group())...)}
	case slog.KindAny:
		var text string
		switch x := v.Any().(type) {
		case error:
			text = x.Error()
		case fmt.Stringer:
			text = x.String()
		case []byte:
			text = string(x)
		default:
			text = fmt.Sprintf("%+v", x)
		}
		if len(text) > MaxLogText {
			return slog.String(a.Key, Clip(text))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// Clip cuts s to MaxLogText bytes (at a character's start) and says how
// long it was, as ClipLogs cuts a log's texts.
func Clip(s string) string {
	if len(s) <= MaxLogText {
		return s
	}
	cut := MaxLogText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}
