package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
)

// cacheUsage is the usage text of the cache flags, the same for every
// command that runs Python.
const cacheUsage = `  --cache-dir DIR          the compilation cache (default $SPINE_CACHE_DIR, else
                           $XDG_CACHE_HOME/spine, else ~/.cache/spine); one that
                           cannot be written means an in-memory cache, not a failure
  --cache-seed DIR         a cache filled by spine warm: each file --cache-dir lacks is
                           linked to it (a symbolic link; a copy where none can be
                           made), so it must stay in place (default $SPINE_CACHE_SEED)
`

// cacheFlags are --cache-dir and --cache-seed.
type cacheFlags struct {
	dir, seed string
}

func (c *cacheFlags) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.dir, "cache-dir", os.Getenv("SPINE_CACHE_DIR"), "")
	fs.StringVar(&c.seed, "cache-seed", os.Getenv("SPINE_CACHE_SEED"), "")
}

// apply sets opts' cache folders and the logger of New's own lines (the
// first compile, a cache that cannot be used): log, else a text logger on
// stderr. It returns opts, made when nil.
func (c *cacheFlags) apply(opts *spine.Options, log *slog.Logger, stderr io.Writer) *spine.Options {
	if opts == nil {
		opts = &spine.Options{}
	}
	opts.CacheDir, opts.SeedCacheDir = c.dir, c.seed
	if log == nil {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	opts.SetupLogger = log
	return opts
}

// logFlags are the flags of the servers' logs: --log-format and --verbose.
type logFlags struct {
	format  string
	verbose bool
}

func (l *logFlags) flags(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "")
	fs.BoolVar(&l.verbose, "verbose", false, "")
}

// logger returns the logger the flags ask for, writing to w, its texts cut
// (door.ClipLogs): Info and up, Debug too with --verbose.
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	level := slog.LevelInfo
	if l.verbose {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch l.format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", l.format)
	}
	return slog.New(door.ClipLogs(h)), nil
}

// serverLog is where the server named name says what it does: records of
// logger with --log-format json, else plain lines on stderr.
func (l *logFlags) serverLog(name string, stderr io.Writer, logger *slog.Logger) serverLog {
	out := serverLog{name: name, w: stderr}
	if l.format == "json" {
		out.json = logger
	}
	return out
}

// servers is where the MCP servers' lines go: stderr, in the log's format,
// their own standard error too with --verbose.
func (l *logFlags) servers(stderr io.Writer) serverLogs {
	return serverLogs{verbose: l.verbose, stderr: stderr, json: l.format == "json"}
}

// flushBound bounds the flush of the spans when a command ends: a collector
// that accepts and never answers costs a spine run, or a server's stop, this
// much at most. Spans not exported by then are dropped, with a warning.
const flushBound = time.Second

// tracing returns the TracerProvider the standard OpenTelemetry environment
// variables ask for, and the function that flushes and stops it (bounded by
// ctx and flushBound); a nil provider when they ask for none. The SDK's and
// the exporter's errors go to logger, not to Go's standard logger.
//
// Spans are exported with OTLP over HTTP (protobuf) when OTEL_TRACES_EXPORTER
// is "otlp", or is unset while OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; "none", OTEL_SDK_DISABLED=true
// or nothing set means no spans. The exporter reads the rest of its
// settings (endpoint, headers, timeout, compression, certificates) from
// OTEL_EXPORTER_OTLP_*, the SDK its sampler (OTEL_TRACES_SAMPLER) and batch
// settings (OTEL_BSP_*); the resource is service.name "spine" unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise. With no
// endpoint set, spans go to http://localhost:4318, the specification's
// default for OTLP/HTTP (the exporter's own would be https).
func tracing(ctx context.Context, logger *slog.Logger) (trace.TracerProvider, func(context.Context), error) {
	none := func(context.Context) {}
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, none, nil
	}
	exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if exporter == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, none, nil
	}
	switch exporter {
	case "none":
		return nil, none, nil
	case "", "otlp":
	default:
		return nil, none, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: spine exports spans with otlp, or none", exporter)
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return nil, none, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: spine exports OTLP over http/protobuf", protocol)
	}
	// The exporter reads its variables in New, and says what it cannot
	// read through OpenTelemetry's logger: both go to logger from here on,
	// for the rest of the process (an export the flush gave up on may still
	// fail after it).
	otel.SetLogger(logr.FromSlogHandler(logger.Handler()))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("OpenTelemetry: "+err.Error(), "error", err.Error())
	}))
	var opts []otlptracehttp.Option
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		opts = append(opts, otlptracehttp.WithInsecure()) // http://localhost:4318
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, none, fmt.Errorf("the OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "spine"), attribute.String("service.version", moduleVersion())),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, none, fmt.Errorf("the OpenTelemetry resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, flushBound)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Warn(fmt.Sprintf("the spans not exported within %v are dropped", flushBound), "error", err.Error())
		}
	}, nil
}
