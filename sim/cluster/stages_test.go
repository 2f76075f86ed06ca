package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"
)

// The subset of kwok's v1alpha1.Stage that our stages use. Strict decoding into it catches a
// misspelt field, which kwok itself would silently ignore.
type testStage struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		ResourceRef struct {
			APIGroup string `json:"apiGroup"`
			Kind     string `json:"kind"`
		} `json:"resourceRef"`
		Selector struct {
			MatchExpressions []struct {
				Key      string   `json:"key"`
				Operator string   `json:"operator"`
				Values   []string `json:"values,omitempty"`
			} `json:"matchExpressions"`
		} `json:"selector"`
		Delay *struct {
			DurationMilliseconds       *int64 `json:"durationMilliseconds,omitempty"`
			JitterDurationMilliseconds *int64 `json:"jitterDurationMilliseconds,omitempty"`
			DurationFrom               *struct {
				ExpressionFrom string `json:"expressionFrom"`
			} `json:"durationFrom,omitempty"`
		} `json:"delay,omitempty"`
		Next struct {
			StatusTemplate string `json:"statusTemplate,omitempty"`
			Delete         bool   `json:"delete,omitempty"`
			Event          *struct {
				Type    string `json:"type"`
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"event,omitempty"`
		} `json:"next"`
	} `json:"spec"`
}

// kwokFuncs stands in for the template functions kwok provides, so the templates' syntax and
// function names are checked here rather than at kwok's run time.
var kwokFuncs = template.FuncMap{
	"Now": func() string { return "" }, "Quote": func(any) string { return "" },
	"NodeConditions": func() []any { return nil }, "NodeIP": func() string { return "" },
	"NodeName": func() string { return "" }, "NodePort": func() int { return 0 },
	"YAML": func(any, ...int) string { return "" }, "Version": func() string { return "" },
	"NodeIPWith": func(string) string { return "" }, "PodIPWith": func(string, bool, string, string, string) string { return "" },
}

func decodeStages(t *testing.T) map[string]testStage {
	t.Helper()
	files, names, err := StageFiles()
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]testStage{}
	for _, n := range names {
		var s testStage
		if err := yaml.UnmarshalStrict(files[n], &s); err != nil {
			t.Fatalf("stage file %s does not decode strictly: %v", n, err)
		}
		if s.APIVersion != "kwok.x-k8s.io/v1alpha1" || s.Kind != "Stage" {
			t.Errorf("%s: apiVersion/kind %s/%s", n, s.APIVersion, s.Kind)
		}
		if s.Metadata.Name+".yaml" != n {
			t.Errorf("%s: stage named %q, want the file's name", n, s.Metadata.Name)
		}
		if s.Spec.ResourceRef.APIGroup != "v1" || (s.Spec.ResourceRef.Kind != "Node" && s.Spec.ResourceRef.Kind != "Pod") {
			t.Errorf("%s: resourceRef %+v", n, s.Spec.ResourceRef)
		}
		if len(s.Spec.Selector.MatchExpressions) == 0 {
			t.Errorf("%s: no selector: it would match every object", n)
		}
		if tmpl := s.Spec.Next.StatusTemplate; tmpl != "" {
			if _, err := template.New(n).Funcs(kwokFuncs).Parse(tmpl); err != nil {
				t.Errorf("%s: status template does not parse: %v", n, err)
			}
		}
		stages[s.Metadata.Name] = s
	}
	return stages
}

func TestStagesDecode(t *testing.T) {
	stages := decodeStages(t)
	for _, want := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete"} {
		if _, ok := stages[want]; !ok {
			t.Errorf("stage %s missing", want)
		}
	}
}

func TestPodCompleteTakesDurationFromAnnotation(t *testing.T) {
	s := decodeStages(t)["pod-complete"]
	if s.Spec.Delay == nil || s.Spec.Delay.DurationFrom == nil {
		t.Fatal("pod-complete has no delay.durationFrom")
	}
	if !strings.Contains(s.Spec.Delay.DurationFrom.ExpressionFrom, `"`+AnnotationDuration+`"`) {
		t.Errorf("durationFrom %q does not read annotation %s", s.Spec.Delay.DurationFrom.ExpressionFrom, AnnotationDuration)
	}
	gated := false
	for _, e := range s.Spec.Selector.MatchExpressions {
		if strings.Contains(e.Key, AnnotationDuration) && e.Operator == "Exists" {
			gated = true
		}
	}
	if !gated {
		t.Error("pod-complete must select only pods that carry the duration annotation")
	}
	if !strings.Contains(s.Spec.Next.StatusTemplate, "phase: Succeeded") {
		t.Error("pod-complete does not make the pod Succeeded")
	}
}

func TestHeartbeatIsSlowerThanLease(t *testing.T) {
	s := decodeStages(t)["node-heartbeat-with-lease"]
	if s.Spec.Delay == nil || s.Spec.Delay.DurationMilliseconds == nil {
		t.Fatal("heartbeat stage has no delay: it would update every node in a loop")
	}
	least := *s.Spec.Delay.DurationMilliseconds
	if least < DefaultNodeLeaseDuration.Milliseconds() {
		t.Errorf("status heartbeat every %d ms is more often than the lease (%s): the lease should carry liveness", least, DefaultNodeLeaseDuration)
	}
	// Nodes created together must not beat together: the delay is drawn between the two
	// bounds, and a window narrower than the mean interval keeps the beats bunched.
	if s.Spec.Delay.JitterDurationMilliseconds == nil {
		t.Fatal("heartbeat stage has no jitter: nodes created together would beat together")
	}
	most := *s.Spec.Delay.JitterDurationMilliseconds
	if mean := (least + most) / 2; most-least < mean {
		t.Errorf("heartbeat delay drawn from [%d, %d] ms: a window of %d ms is narrower than the mean interval %d ms, so nodes created together beat bunched", least, most, most-least, mean)
	}
}

func TestPodDeleteDeletes(t *testing.T) {
	if s := decodeStages(t)["pod-delete"]; !s.Spec.Next.Delete {
		t.Error("pod-delete does not delete")
	}
}

func TestWriteKwokConfig(t *testing.T) {
	dir := t.TempDir()
	files, err := writeKwokConfig(dir, 240, "127.0.0.1:12345")
	if err != nil {
		t.Fatal(err)
	}
	_, names, _ := StageFiles()
	if len(files) != 1+len(names) {
		t.Fatalf("wrote %d files, want the configuration and %d stages", len(files), len(names))
	}
	var cfg kwokConfiguration
	if err := readYAML(files[0], &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Kind != "KwokConfiguration" || cfg.Options.NodeLeaseDurationSeconds != 240 ||
		cfg.Options.ServerAddress != "127.0.0.1:12345" ||
		cfg.Options.ManageNodesWithAnnotationSelector != "kwok.x-k8s.io/node=fake" {
		t.Errorf("unexpected kwok configuration %+v", cfg)
	}
	for _, f := range files {
		if filepath.Dir(f) != dir {
			t.Errorf("%s written outside %s", f, dir)
		}
	}
}

func readYAML(path string, into any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return yaml.UnmarshalStrict(b, into)
}
