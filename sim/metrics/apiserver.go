package metrics

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The kube-apiserver's series that say where a request's time went inside it.
const (
	apiRequestDuration = "apiserver_request_duration_seconds"
	apiWebhookDuration = "apiserver_admission_webhook_admission_duration_seconds"
	apiPluginDuration  = "apiserver_admission_controller_admission_duration_seconds"
)

// APIServer is where the requests' time went inside the kube-apiserver during one run's
// workload, from its own histograms: the difference between its /metrics read at the
// workload's start and at its end (its series count from the API server's start, and a
// control plane may serve more than one run).
type APIServer struct {
	// Requests are the API server's latency by verb and resource
	// (apiserver_request_duration_seconds: from the request's arrival to its response,
	// admission webhooks and etcd included), keyed as RequestKey.String ("POST pods/binding").
	// Long-running verbs (WATCH, CONNECT) are left out: their duration is the watch's life.
	Requests map[string]*Stage `json:"requests,omitempty"`
	// Webhooks are the admission webhooks' calls as the API server timed them
	// (apiserver_admission_webhook_admission_duration_seconds), keyed "<name> <operation>
	// (<type>)": the wait a webhook adds to the requests it is called for.
	Webhooks map[string]*Stage `json:"webhooks,omitempty"`
	// Admission are the API server's built-in admission plugins as it timed them
	// (apiserver_admission_controller_admission_duration_seconds), keyed "<plugin> <operation>
	// (<type>)": ResourceQuota, for one, queues the creates of a namespace behind one another.
	Admission map[string]*Stage `json:"admission,omitempty"`
}

// Histograms are the histogram series of a /metrics page, for the difference of two pages.
type Histograms map[string][]Histogram

// Histogram is one series: its labels, count, sum and cumulative buckets by upper bound.
type Histogram struct {
	Labels  map[string]string
	Count   uint64
	Sum     float64
	Buckets map[float64]uint64
}

// key identifies a series among its family's by its labels.
func (h Histogram) key() string {
	names := make([]string, 0, len(h.Labels))
	for n := range h.Labels {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s=%q,", n, h.Labels[n])
	}
	return b.String()
}

// ParseHistograms reads the histograms of the named families from a /metrics page in the
// Prometheus text format; a family the page lacks is absent, a page that does not parse is
// an error.
func ParseHistograms(in io.Reader, families ...string) (Histograms, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(in)
	if err != nil {
		return nil, fmt.Errorf("parsing a /metrics page: %w", err)
	}
	out := Histograms{}
	for _, name := range families {
		fam := fams[name]
		if fam == nil || fam.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range fam.GetMetric() {
			h := m.GetHistogram()
			s := Histogram{Labels: map[string]string{}, Count: h.GetSampleCount(), Sum: h.GetSampleSum(), Buckets: map[float64]uint64{}}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			for _, b := range h.GetBucket() {
				s.Buckets[b.GetUpperBound()] = b.GetCumulativeCount()
			}
			out[name] = append(out[name], s)
		}
	}
	return out, nil
}

// Sub is what h counted since before: each series less the same series of before (a series
// before lacks counts whole). A series that went down (the process restarted in between)
// counts whole as well.
func (h Histograms) Sub(before Histograms) Histograms {
	out := Histograms{}
	for name, series := range h {
		prev := map[string]Histogram{}
		for _, s := range before[name] {
			prev[s.key()] = s
		}
		for _, s := range series {
			p, ok := prev[s.key()]
			if !ok || p.Count > s.Count {
				out[name] = append(out[name], s)
				continue
			}
			d := Histogram{Labels: s.Labels, Count: s.Count - p.Count, Sum: s.Sum - p.Sum, Buckets: map[float64]uint64{}}
			for ub, c := range s.Buckets {
				d.Buckets[ub] = c - min(p.Buckets[ub], c)
			}
			out[name] = append(out[name], d)
		}
	}
	return out
}

// stagesByKey merges the series of family into one Stage per key(labels); a series key
// rejects ("" ) is left out, and so is a key without observations.
func (h Histograms) stagesByKey(family string, key func(labels map[string]string) string) map[string]*Stage {
	type merged struct {
		count   uint64
		sum     float64
		buckets map[float64]uint64
	}
	acc := map[string]*merged{}
	for _, s := range h[family] {
		k := key(s.Labels)
		if k == "" || s.Count == 0 {
			continue
		}
		m := acc[k]
		if m == nil {
			m = &merged{buckets: map[float64]uint64{}}
			acc[k] = m
		}
		m.count += s.Count
		m.sum += s.Sum
		for ub, c := range s.Buckets {
			m.buckets[ub] += c
		}
	}
	var out map[string]*Stage
	for k, m := range acc {
		if out == nil {
			out = map[string]*Stage{}
		}
		out[k] = stageFrom(m.count, m.sum, m.buckets)
	}
	return out
}

// longRunning are the verbs whose request duration is a watch's or a stream's life.
var longRunning = []string{"WATCH", "WATCHLIST", "CONNECT"}

// APIServerFigures reads an APIServer from what the API server's histograms counted over the
// workload (the difference of two ParseHistograms of its page with APIServerFamilies).
func APIServerFigures(h Histograms) *APIServer {
	out := &APIServer{
		Requests: h.stagesByKey(apiRequestDuration, func(l map[string]string) string {
			if slices.Contains(longRunning, l["verb"]) {
				return ""
			}
			return RequestKey{Verb: l["verb"], Group: l["group"], Resource: l["resource"], Subresource: l["subresource"]}.String()
		}),
		Webhooks:  h.stagesByKey(apiWebhookDuration, admissionKey),
		Admission: h.stagesByKey(apiPluginDuration, admissionKey),
	}
	if out.Requests == nil && out.Webhooks == nil && out.Admission == nil {
		return nil
	}
	return out
}

// admissionKey names an admission step by its webhook or plugin, operation and type.
func admissionKey(l map[string]string) string {
	return fmt.Sprintf("%s %s (%s)", l["name"], l["operation"], l["type"])
}

// APIServerFamilies are the families APIServerFigures reads.
var APIServerFamilies = []string{apiRequestDuration, apiWebhookDuration, apiPluginDuration}
