package door

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spine-run/spine"
)

// RunnerCollector returns a Prometheus collector of runner's Stats (the
// pool, the sessions), as service.Server's /metrics exports them, for other
// handlers over a Runner (spine mcp --http).
func RunnerCollector(runner *spine.Runner) prometheus.Collector {
	return runnerCollector{runner}
}

// runnerCollector exports the Runner's Stats, read once per scrape.
type runnerCollector struct{ runner *spine.Runner }

var (
	descPoolReady     = prometheus.NewDesc("spine_pool_ready", "Guest instances started and waiting in the pool.", nil, nil)
	descPoolSize      = prometheus.NewDesc("spine_pool_size", "The pool's target size (0 without a pool).", nil, nil)
	descInstancesMade = prometheus.NewDesc("spine_instances_made_total", "Guest instances instantiated by the Runner.", nil, nil)
	descRunsStarted   = prometheus.NewDesc("spine_runner_runs_started_total", "Runs started by the Runner, whoever asked.", nil, nil)
	descSessions      = prometheus.NewDesc("spine_sessions", "Sessions the Runner holds, live and hibernated, whoever made them.", nil, nil)
	descSessionsLive  = prometheus.NewDesc("spine_sessions_live", "Of those, sessions with a live Guest (the rest are hibernated).", nil, nil)
)

func (c runnerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPoolReady
	ch <- descPoolSize
	ch <- descInstancesMade
	ch <- descRunsStarted
	ch <- descSessions
	ch <- descSessionsLive
}

func (c runnerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.runner.Stats()
	ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(st.PoolReady))
	ch <- prometheus.MustNewConstMetric(descPoolSize, prometheus.GaugeValue, float64(st.PoolSize))
	ch <- prometheus.MustNewConstMetric(descInstancesMade, prometheus.CounterValue, float64(st.InstancesMade))
	ch <- prometheus.MustNewConstMetric(descRunsStarted, prometheus.CounterValue, float64(st.Runs))
	ss := c.runner.SessionStats()
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(ss.Sessions))
	ch <- prometheus.MustNewConstMetric(descSessionsLive, prometheus.GaugeValue, float64(ss.Live))
}
