package webhook

import (
	"net/http"
	"strconv"
	"time"

	"k8s.io/component-base/metrics"
)

// The project's one metric prefix is gpu_scheduler_; the webhook's series are
// gpu_scheduler_webhook_*.
const (
	metricsNamespace = "gpu_scheduler"
	metricsSubsystem = "webhook"
)

// Admission results, the values of the admissions_total "result" label.
const (
	resultAllowed = "allowed"
	resultDenied  = "denied"
	resultError   = "error"
)

// serverMetrics are the webhook's own metrics, in a registry per Server so that several servers
// (tests, an in-process integration run) never share or double-register collectors.
type serverMetrics struct {
	registry   metrics.KubeRegistry
	requests   *metrics.CounterVec
	admissions *metrics.CounterVec
	mutations  *metrics.CounterVec
	denials    *metrics.CounterVec
	latency    *metrics.HistogramVec
}

func newServerMetrics() *serverMetrics {
	m := &serverMetrics{
		registry: metrics.NewKubeRegistry(),
		requests: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "requests_total",
			Help:           "Admission requests served, by webhook path and HTTP status code.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"webhook", "code"}),
		admissions: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "admissions_total",
			Help:           "Admission requests answered, by webhook path and result: allowed (mutated or not), denied, or error (the request never got a review answer).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"webhook", "result"}),
		mutations: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "mutations_total",
			Help:           "Pods the mutating webhook patched, by whether a user-set variable was replaced.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"replaced"}),
		denials: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "denials_total",
			Help:           "Admission requests denied, by webhook path and reason.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"webhook", "reason"}),
		latency: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace:      metricsNamespace,
			Subsystem:      metricsSubsystem,
			Name:           "admission_duration_seconds",
			Help:           "Time to answer an admission request, by webhook path.",
			Buckets:        metrics.ExponentialBuckets(0.0005, 2, 14),
			StabilityLevel: metrics.ALPHA,
		}, []string{"webhook"}),
	}
	m.registry.MustRegister(m.requests, m.admissions, m.mutations, m.denials, m.latency)
	// Every series the alerts and the dashboard read exists from the start at 0, so that a
	// rate() over it is 0 rather than absent before the first request.
	for _, w := range []string{"mutate", "validate"} {
		for _, r := range []string{resultAllowed, resultDenied, resultError} {
			m.admissions.WithLabelValues(w, r)
		}
		m.latency.WithLabelValues(w)
	}
	return m
}

func (m *serverMetrics) observe(webhook string, code int, outcome Outcome, start time.Time) {
	m.requests.WithLabelValues(webhook, strconv.Itoa(code)).Inc()
	result := resultAllowed
	switch {
	case code != http.StatusOK:
		result = resultError
	case outcome.DenyReason != "":
		result = resultDenied
	}
	m.admissions.WithLabelValues(webhook, result).Inc()
	m.latency.WithLabelValues(webhook).Observe(time.Since(start).Seconds())
}

func (m *serverMetrics) handler() http.Handler {
	return metrics.HandlerFor(m.registry, metrics.HandlerOpts{})
}
