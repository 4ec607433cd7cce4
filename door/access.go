package door

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// RequestIDHeader carries a request's id: taken from the request when it
// is a fit one (MaxRequestID bytes at most, of letters, digits and
// "-_.:/+="), else made (16 random bytes, hex), and always sent back.
const RequestIDHeader = "X-Request-Id"

// MaxRequestID is the longest request id taken from a client.
const MaxRequestID = 128

// requestInfo is what the access log learns of a request while it is
// served: the handlers fill it in through its context.
type requestInfo struct {
	id        string
	token     string // the token's name: "default", a tokens file's name, "-" for none
	session   string
	errorKind string // the answer's error kind, when it has one
	status    int    // the run's status, for an answer sent as events (200)
	drained   bool   // a 503 a drain gives by design (NoteDrained)
}

type requestInfoKey struct{}

func infoOf(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return info
}

// TokenName returns the name of the token the request of ctx was let in
// with, as the access log shows it: "default" for service.Options.Token (or
// RequireToken's token), the name a tokens file gives, "-" when the server
// needs none or the request carried none. It never returns a token. ""
// outside AccessLog.
func TokenName(ctx context.Context) string {
	if info := infoOf(ctx); info != nil {
		return info.token
	}
	return ""
}

// SetTokenName records the name of the token the request of ctx was let in
// with, for TokenName and the access log; outside AccessLog it does
// nothing. An authentication handler calls it; name must not be a secret.
func SetTokenName(ctx context.Context, name string) {
	if info := infoOf(ctx); info != nil {
		info.token = name
	}
}

// SetSession records the session the request of ctx is about, for the
// access log; outside AccessLog, or with id "", it does nothing.
func SetSession(ctx context.Context, id string) {
	if info := infoOf(ctx); info != nil && id != "" {
		info.session = id
	}
}

// NoteAnswer records the error kind of an answer and, for one sent as
// events, its status, for the access log. WriteJSON notes the answers it
// writes.
func NoteAnswer(w http.ResponseWriter, status int, kind string) {
	for {
		switch x := w.(type) {
		case *accessWriter:
			x.info.errorKind, x.info.status = kind, status
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

// NoteDrained records that the answer is one a drain gives by design: GET
// /readyz's 503, a request refused because the server is draining. The
// access log puts it at Info, not Error.
func NoteDrained(w http.ResponseWriter) {
	for {
		switch x := w.(type) {
		case *accessWriter:
			x.info.drained = true
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

// AccessLog serves next and logs one line per request to logger at Info
// ("request"; Error for a status of 500 and up, but the 503s a drain gives
// by design: /readyz's, and requests refused while draining): method, path, status,
// bytes (of the body), duration_ms, request_id (RequestIDHeader), session
// (when the request is about one), token (TokenName: a name, never the
// token), error (the answer's error kind, when it has one; for an answer
// sent as events, the run's status is "run_status"), remote, and trace_id
// when there is a span. With tp, each request but the probes' and
// /metrics is a server span (named by its method) whose context the
// handlers get, so a run's spans are its children. spine serve and spine mcp --http wrap their handlers in it.
func AccessLog(logger *slog.Logger, tp trace.TracerProvider, next http.Handler) http.Handler {
	var tracer trace.Tracer
	if tp != nil {
		tracer = tp.Tracer("github.com/spine-run/spine/service") // the scope its spans have always had
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &requestInfo{id: requestID(r.Header.Get(RequestIDHeader)), token: "-"}
		w.Header().Set(RequestIDHeader, info.id)
		ctx := context.WithValue(r.Context(), requestInfoKey{}, info)
		var span trace.Span
		if tracer != nil && !(IsProbe(r.URL.Path) || r.URL.Path == "/metrics") {
			ctx, span = tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
				attribute.String("http.request.method", r.Method),
				attribute.String("url.path", r.URL.Path),
				attribute.String("spine.request_id", info.id)))
		}
		aw := &accessWriter{ResponseWriter: w, info: info}
		defer func() {
			if aw.status == 0 {
				aw.status = http.StatusOK // nothing written: net/http answers 200
			}
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				slog.String("path", r.URL.Path),
				slog.Int("status", aw.status),
				slog.Int64("bytes", aw.bytes),
				slog.Float64("duration_ms", ms(time.Since(start))),
				slog.String("request_id", info.id),
				slog.String("token", info.token),
			}
			if info.session != "" {
				attrs = append(attrs, slog.String("session", info.session))
			}
			if info.errorKind != "" {
				attrs = append(attrs, slog.String("error", info.errorKind))
			}
			if info.status != 0 && info.status != aw.status {
				attrs = append(attrs, slog.Int("run_status", info.status))
			}
			attrs = append(attrs, slog.String("remote", r.RemoteAddr))
			if span != nil {
				span.SetAttributes(attribute.Int("http.response.status_code", aw.status))
				if aw.status >= 500 {
					span.SetStatus(codes.Error, http.StatusText(aw.status))
				}
				if sc := span.SpanContext(); sc.IsValid() {
					attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
				}
				span.End()
			}
			level := slog.LevelInfo
			if aw.status >= 500 && !info.drained {
				level = slog.LevelError
			}
			logger.LogAttrs(context.Background(), level, "request", attrs...)
		}()
		next.ServeHTTP(aw, r.WithContext(ctx))
	})
}

// requestID returns the client's id when it is fit to log and send back,
// else a new one.
func requestID(given string) string {
	if given != "" && len(given) <= MaxRequestID {
		ok := true
		for i := 0; i < len(given) && ok; i++ {
			c := given[i]
			ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
				c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '+' || c == '='
		}
		if ok {
			return given
		}
	}
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// accessWriter counts what is written; http.NewResponseController reaches
// the writer below through Unwrap (flushes, deadlines, full duplex).
type accessWriter struct {
	http.ResponseWriter
	info   *requestInfo
	status int
	bytes  int64
}

func (w *accessWriter) WriteHeader(status int) {
	if w.status == 0 && status >= 200 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *accessWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Flush is http.Flusher's, for handlers that ask for it directly.
func (w *accessWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *accessWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
