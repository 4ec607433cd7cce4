package service

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/spine-run/spine/door"
)

// metrics are the Server's Prometheus metrics.
type metrics struct {
	runs      *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	toolCalls prometheus.Counter
	errors    *prometheus.CounterVec
	inFlight  prometheus.Gauge

	streamsInFlight prometheus.Gauge

	sessionOps   *prometheus.CounterVec
	sessionWaits prometheus.Gauge
	storeOps     *prometheus.CounterVec // store.go
}

// Outcomes of an admitted run (labels of spine_runs_total and
// spine_run_duration_seconds), and every error kind (spine_errors_total).
var (
	runOutcomes = []string{"ok", kindPython, kindTimeout, kindTooLarge, kindBadRequest, kindCanceled, kindGuest, kindClosed, kindInternal, kindStreamIdle,
		kindNotFound, kindSessionGone, kindTooManySessions, kindConflict, kindStoreUnavailable, kindOtherImage, kindRunDiverged}
	errorKinds = []string{kindPython, kindTimeout, kindTooLarge, kindGuest, kindBadRequest, kindOverloaded, kindCanceled, kindClosed, kindInternal,
		kindUnauthorized, kindReadTimeout, kindStreamIdle, kindForbidden, kindUnsupportedMediaType,
		kindNotFound, kindSessionGone, kindBadSnapshot, kindTooManySessions, kindConflict, kindStoreUnavailable, kindOtherImage, kindRunDiverged}
	sessionOperations = []string{opCreate, opRestore, opSnapshot, opDelete}
	storeOperations   = []string{"load", "refresh", "write", "conflict"}
)

func newMetrics(s *Server) *metrics {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spine_runs_total",
			Help: "Runs admitted and finished, by outcome (ok or an error kind).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "spine_run_duration_seconds",
			Help:    "Time spent in Runner.Run per admitted run (a streamed program's reading included), by outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"outcome"}),
		toolCalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spine_tool_calls_total",
			Help: "Tool calls made by programs.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spine_errors_total",
			Help: "Requests that failed or were refused, by kind: python, timeout, too_large, guest, bad_request, overloaded, canceled, closed, internal, unauthorized, read_timeout, stream_idle, forbidden, unsupported_media_type, not_found, session_gone, bad_snapshot, too_many_sessions, conflict, store_unavailable, other_image.",
		}, []string{"kind"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spine_runs_in_flight",
			Help: "Runs, and session operations (create, restore, snapshot), holding a slot now.",
		}),
		streamsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spine_streams_in_flight",
			Help: "Streams (POST /v1/run/stream) holding a slot now, counted in spine_runs_in_flight too.",
		}),
		sessionOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spine_session_operations_total",
			Help: "Session requests other than runs (counted in spine_runs_total), by operation (create, restore, snapshot, delete) and outcome (ok or an error kind).",
		}, []string{"operation", "outcome"}),
		sessionWaits: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spine_session_requests_waiting",
			Help: "Requests waiting, without a slot, for their session's previous run or snapshot to end.",
		}),
		storeOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spine_session_store_operations_total",
			Help: "With a session store: sessions loaded because this replica did not hold them (load), reloaded because another replica wrote a newer generation (refresh), generations written (write) and writes another replica's won (conflict).",
		}, []string{"operation"}),
	}
	for _, op := range storeOperations {
		m.storeOps.WithLabelValues(op)
	}
	for _, op := range sessionOperations {
		m.sessionOps.WithLabelValues(op, "ok")
	}
	for _, o := range runOutcomes {
		m.runs.WithLabelValues(o)
	}
	for _, k := range errorKinds {
		m.errors.WithLabelValues(k)
	}
	slots := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "spine_slots",
		Help: "Runs the server admits at once; past it requests get 429.",
	}, func() float64 { return float64(cap(s.slots)) })
	streamSlots := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "spine_stream_slots",
		Help: "How many of the slots streams may hold at once; past it streams get 429.",
	}, func() float64 { return float64(cap(s.streams)) })
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "spine_server_sessions",
		Help: "Sessions made through this server and not yet deleted, expired or found closed.",
	}, func() float64 { return float64(s.fleet.Len()) })
	s.registry.MustRegister(m.runs, m.duration, m.toolCalls, m.errors, m.inFlight, m.streamsInFlight, slots, streamSlots,
		m.sessionOps, m.sessionWaits, m.storeOps, held,
		door.RunnerCollector(s.runner),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
