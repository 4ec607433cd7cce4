package main

import (
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveMetrics serves GET /metrics alone, from registry, on addr: for a
// scraper that carries no token (spine serve --metrics-listen). The metrics
// hold no token and no program's data (docs/observability.md), so the
// listener asks for none; any other path is 404, and a request is bounded as
// the main listener's are (headers and body within 10s, the answer within 30s, four
// scrapes at once). It returns the function that closes it, or nil
// and the exit code when addr cannot be listened on.
func serveMetrics(addr string, registry *prometheus.Registry, out serverLog) (stop func(), code int) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		out.error("--metrics-listen: " + err.Error())
		return nil, exitFailure
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{MaxRequestsInFlight: 4}))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: maxHeaderTimeout,
		ReadTimeout:       maxHeaderTimeout,
		WriteTimeout:      defaultReadTimeout,
		IdleTimeout:       defaultIdleTimeout,
		MaxHeaderBytes:    8 << 10,
	}
	go srv.Serve(ln)
	out.info(fmt.Sprintf("metrics on http://%s/metrics", ln.Addr()), "addr", ln.Addr().String())
	return func() { srv.Close() }, exitOK
}
