package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spine-run/spine/service"
)

// cutWait bounds how long a drain waits for the answers of the runs Cut
// stopped: a stopped run returns at once, so this is only a backstop.
const cutWait = 10 * time.Second

// defaultDrainDelay is --drain-delay's default: how long, at least, a
// server's listener stays open after SIGTERM, answering /readyz 503 and
// refusing new requests 503, so that a load balancer that polls /readyz
// (a Kubernetes Service's endpoints) stops sending it requests before the
// port closes.
const defaultDrainDelay = 5 * time.Second

// signalCause is the cause of a context that shutdownContext ended: the
// signal that came.
type signalCause struct{ os.Signal }

func (c signalCause) Error() string { return c.Signal.String() }

// shutdownContext returns a context that ends at the first SIGINT or
// SIGTERM, with a signalCause, and the function that restores the signals'
// default behaviour, so that a second one ends the process at once.
func shutdownContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-signals:
			cancel(signalCause{s})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(signals)
		cancel(context.Canceled)
	}
}

// serving is how spine serve and spine mcp --http run their listener: the
// limits on clients, the drain's times, and where they say what they do.
type serving struct {
	limits httpLimits
	grace  time.Duration // the requests in flight have this long, from the drain's start

	// delay is --drain-delay: after the drain starts the listener stays
	// open at least this long, but after a SIGINT (a Ctrl-C: nobody's load
	// balancer is waiting). delayed, when set, ends the delay in place of
	// its timer (tests).
	delay   time.Duration
	delayed <-chan struct{}

	log  serverLog
	what string // said after the address it listens on
}

// drainDelay returns a channel closed when the listener of a drain that
// began when ctx ended may close.
func (s serving) drainDelay(ctx context.Context) <-chan struct{} {
	if s.delayed != nil {
		return s.delayed
	}
	done := make(chan struct{})
	var cause signalCause
	if s.delay <= 0 || errors.As(context.Cause(ctx), &cause) && cause.Signal == os.Interrupt {
		close(done)
		return done
	}
	time.AfterFunc(s.delay, func() { close(done) })
	return done
}

// serverLog is where a server says what it does (listening, shutting
// down, stopped, what failed): plain lines "spine serve: msg" on w, or,
// with --log-format json, records of json (msg and args), so that every
// line of its standard error is one.
type serverLog struct {
	name string // "spine serve"
	w    io.Writer
	json *slog.Logger
}

func (l serverLog) log(level slog.Level, msg string, args ...any) {
	if l.json != nil {
		l.json.Log(context.Background(), level, msg, args...)
		return
	}
	fmt.Fprintf(l.w, "%s: %s\n", l.name, msg)
}

// lines returns a writer of whole lines ("spine serve: warning: ..."), one
// a Write, for code that prints them: w as it is, or, with json, each line a
// record at level, its "spine ...: " and "warning: " taken off.
func (l serverLog) lines(level slog.Level) io.Writer {
	if l.json == nil {
		return l.w
	}
	return lineRecords{l.json, level}
}

type lineRecords struct {
	log   *slog.Logger
	level slog.Level
}

func (r lineRecords) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if rest, ok := strings.CutPrefix(line, "spine "); ok {
			if _, after, ok := strings.Cut(rest, ": "); ok {
				line = after
			}
		}
		r.log.Log(context.Background(), r.level, strings.TrimPrefix(line, "warning: "))
	}
	return len(p), nil
}

func (l serverLog) info(msg string, args ...any)  { l.log(slog.LevelInfo, msg, args...) }
func (l serverLog) warn(msg string, args ...any)  { l.log(slog.LevelWarn, msg, args...) }
func (l serverLog) error(msg string, args ...any) { l.log(slog.LevelError, msg, args...) }

// serveDrained serves handler (svc, wrapped) on ln until ctx ends (a
// signal), then drains it (service.Server.Drain): /readyz answers 503 and
// new requests 503 while the listener stays open and /healthz and /livez
// answer; the requests in flight have grace to end, and those still going
// are stopped and answered 503; every session is written to the store;
// then, once the drain delay is over too, the listener closes. It returns
// exitOK once everything in flight was answered and stored.
func serveDrained(ctx context.Context, stop func(), ln net.Listener, svc *service.Server, handler http.Handler, s serving) int {
	srv, served := startHTTP(ln, handler, s)
	select {
	case err := <-served:
		s.log.error(err.Error())
		svc.Close(context.Background())
		return exitFailure
	case <-ctx.Done():
	}
	stop()
	svc.Drain()
	delayed := s.drainDelay(ctx)
	s.log.info(fmt.Sprintf("shutting down; waiting up to %v for requests in flight", s.grace), "grace", s.grace.String())
	graceCtx, cancel := context.WithTimeout(context.Background(), s.grace)
	defer cancel()
	code := exitOK
	if svc.Wait(graceCtx) != nil {
		s.log.warn(fmt.Sprintf("requests still in flight after %v; stopping them (answered 503)", s.grace))
		svc.Cut()
		cutCtx, cancel := context.WithTimeout(context.Background(), cutWait)
		defer cancel()
		if svc.Wait(cutCtx) != nil {
			s.log.error("requests still in flight after they were stopped")
			code = exitFailure
		}
	}
	// Every request has its answer: write the sessions while the probes
	// still answer, then, after the drain delay, close the listener and the
	// idle connections.
	storeCtx, cancel := context.WithTimeout(context.Background(), max(s.grace, cutWait))
	defer cancel()
	if err := svc.Close(storeCtx); err != nil {
		s.log.error("storing the sessions: "+err.Error(), "error", err.Error())
		code = exitFailure
	}
	<-delayed
	closeCtx, cancel := context.WithTimeout(context.Background(), cutWait)
	defer cancel()
	if srv.Shutdown(closeCtx) != nil {
		srv.Close()
	}
	if code == exitOK {
		s.log.info("stopped")
	}
	return code
}
