package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/spine-run/spine/service"
)

// cutWait bounds how long a drain waits for the answers of the runs Cut
// stopped: a stopped run returns at once, so this is only a backstop.
const cutWait = 10 * time.Second

// serveDrained serves handler (svc, wrapped) on ln until ctx ends (a signal), then drains it
// (service.Server.Drain): /readyz answers 503 and new requests 503 while
// the listener stays open and /healthz and /livez answer; the requests in
// flight have grace to end, and those still going are stopped and answered
// 503; every session is written to the store; then the listener closes.
// It returns exitOK once everything in flight was answered and stored.
func serveDrained(ctx context.Context, stop func(), ln net.Listener, svc *service.Server, handler http.Handler, limits httpLimits, grace time.Duration, name, what string, stderr io.Writer) int {
	srv, served := startHTTP(ln, handler, limits, name, what, stderr)
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		svc.Close(context.Background())
		return exitFailure
	case <-ctx.Done():
	}
	stop()
	svc.Drain()
	fmt.Fprintf(stderr, "%s: shutting down; waiting up to %v for requests in flight\n", name, grace)
	graceCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	code := exitOK
	if svc.Wait(graceCtx) != nil {
		fmt.Fprintf(stderr, "%s: requests still in flight after %v; stopping them (answered 503)\n", name, grace)
		svc.Cut()
		cutCtx, cancel := context.WithTimeout(context.Background(), cutWait)
		defer cancel()
		if svc.Wait(cutCtx) != nil {
			fmt.Fprintf(stderr, "%s: requests still in flight after they were stopped\n", name)
			code = exitFailure
		}
	}
	// Every request has its answer: write the sessions while the probes
	// still answer, then close the listener and the idle connections.
	storeCtx, cancel := context.WithTimeout(context.Background(), max(grace, cutWait))
	defer cancel()
	if err := svc.Close(storeCtx); err != nil {
		fmt.Fprintf(stderr, "%s: storing the sessions: %v\n", name, err)
		code = exitFailure
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), cutWait)
	defer cancel()
	if srv.Shutdown(closeCtx) != nil {
		srv.Close()
	}
	if code == exitOK {
		fmt.Fprintf(stderr, "%s: stopped\n", name)
	}
	return code
}
