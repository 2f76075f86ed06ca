package webhook

import (
	"net/http"
	"strconv"
	"time"

	"k8s.io/component-base/metrics"
)

const metricsSubsystem = "gpu_webhook"

// serverMetrics are the webhook's own metrics, in a registry per Server so that several servers
// (tests, an in-process integration run) never share or double-register collectors.
type serverMetrics struct {
	registry  metrics.KubeRegistry
	requests  *metrics.CounterVec
	mutations *metrics.CounterVec
	denials   *metrics.CounterVec
	latency   *metrics.HistogramVec
}

func newServerMetrics() *serverMetrics {
	m := &serverMetrics{
		registry: metrics.NewKubeRegistry(),
		requests: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem:      metricsSubsystem,
			Name:           "requests_total",
			Help:           "Admission requests served, by webhook path and HTTP status code.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"webhook", "code"}),
		mutations: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem:      metricsSubsystem,
			Name:           "mutations_total",
			Help:           "Pods the mutating webhook patched, by whether a user-set variable was replaced.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"replaced"}),
		denials: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem:      metricsSubsystem,
			Name:           "denials_total",
			Help:           "Admission requests denied, by webhook path and reason.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"webhook", "reason"}),
		latency: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Subsystem:      metricsSubsystem,
			Name:           "request_duration_seconds",
			Help:           "Time to answer an admission request, by webhook path.",
			Buckets:        metrics.ExponentialBuckets(0.0005, 2, 14),
			StabilityLevel: metrics.ALPHA,
		}, []string{"webhook"}),
	}
	m.registry.MustRegister(m.requests, m.mutations, m.denials, m.latency)
	return m
}

func (m *serverMetrics) observe(webhook string, code int, start time.Time) {
	m.requests.WithLabelValues(webhook, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(webhook).Observe(time.Since(start).Seconds())
}

func (m *serverMetrics) handler() http.Handler {
	return metrics.HandlerFor(m.registry, metrics.HandlerOpts{})
}
