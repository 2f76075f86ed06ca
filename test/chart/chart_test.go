// Package chart tests the Helm chart in charts/gpu-scheduler: helm lint, golden renderings of
// default and non-default values, values-schema rejections, secure defaults, and that the
// rendered scheduler configuration and webhook configurations are the same as their one
// canonical definition (scheduler/config/scheduler-config.yaml and webhook/manifests). These
// tests need only the helm binary; install_test.go (build tag integration) installs the chart
// into a real control plane.
//
//	go test ./test/chart -update   # rewrite the golden files and the chart's copy of the config
package chart

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/config"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
)

var update = flag.Bool("update", false, "rewrite the golden files and charts/gpu-scheduler/files/scheduler-config.yaml")

// Every testdata/<case>.values.yaml is rendered and compared with testdata/<case>.golden.yaml.
func TestTemplateGolden(t *testing.T) {
	cases, err := filepath.Glob("testdata/*.values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no testdata/*.values.yaml")
	}
	for _, values := range cases {
		name := strings.TrimSuffix(filepath.Base(values), ".values.yaml")
		t.Run(name, func(t *testing.T) {
			got := maskGenerated(mustTemplate(t, "-f", values))
			golden := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./test/chart -update)", err)
			}
			if got != string(want) {
				t.Errorf("helm template with %s differs from %s (go test ./test/chart -update rewrites it):\n%s", values, golden, lineDiff(string(want), got))
			}
		})
	}
}

// generatedPEM matches the certificate material the chart generates anew on every render.
var generatedPEM = regexp.MustCompile(`(?m)^(\s*(?:ca\.crt|tls\.crt|tls\.key|caBundle):) [A-Za-z0-9+/=]{40,}$`)

func maskGenerated(s string) string { return generatedPEM.ReplaceAllString(s, "$1 <generated>") }

// lineDiff shows the first lines that differ, with a little context.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		if i < len(w) && i < len(g) && w[i] == g[i] {
			continue
		}
		var b strings.Builder
		for j := max(0, i-3); j < min(i+6, max(len(w), len(g))); j++ {
			wl, gl := "", ""
			if j < len(w) {
				wl = w[j]
			}
			if j < len(g) {
				gl = g[j]
			}
			mark := " "
			if wl != gl {
				mark = "!"
			}
			b.WriteString(mark + " want: " + wl + "\n" + mark + " got:  " + gl + "\n")
		}
		return b.String()
	}
	return "(identical)"
}

func TestLint(t *testing.T) {
	cases, err := filepath.Glob("testdata/*.values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, values := range cases {
		t.Run(filepath.Base(values), func(t *testing.T) {
			out, err := runHelm(t, nil, "lint", "--strict", chartDir(t), "--namespace", releaseNamespace, "--kube-version", kubeVersion, "-f", values)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// A wrong value fails with a message that names it. want is the line helm prints.
func TestValuesRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{{
		name: "zero scheduler replicas",
		args: []string{"--set", "scheduler.replicas=0"},
		want: "- at '/scheduler/replicas': minimum: got 0, want 1",
	}, {
		name: "unknown node strategy",
		args: []string{"--set", "scheduler.pluginArgs.nodeStrategy=cheapest"},
		want: `- at '/scheduler/pluginArgs/nodeStrategy': value must be one of 'binpack', 'spread', 'least-utilized', 'round-robin', 'random', 'cost-aware'`,
	}, {
		name: "misspelt plugin arg",
		args: []string{"--set", "scheduler.pluginArgs.leaseNamepsace=x"},
		want: "- at '/scheduler/pluginArgs': additional properties 'leaseNamepsace' not allowed",
	}, {
		name: "lease namespace is not a value",
		args: []string{"--set", "scheduler.pluginArgs.leaseNamespace=elsewhere"},
		want: "- at '/scheduler/pluginArgs': additional properties 'leaseNamespace' not allowed",
	}, {
		name: "webhook timeout beyond what the apiserver accepts",
		args: []string{"--set", "webhook.timeoutSeconds=31"},
		want: "- at '/webhook/timeoutSeconds': maximum: got 31, want 30",
	}, {
		name: "visible devices variable",
		args: []string{"--set", "webhook.visibleDevicesEnv=rocm"},
		want: "- at '/webhook/visibleDevicesEnv': value must be one of 'cuda', 'nvidia', 'both'",
	}, {
		name: "nvml mode",
		args: []string{"--set", "agent.nvml.mode=magic"},
		want: "- at '/agent/nvml/mode': value must be one of 'runtimeClass', 'hostPath'",
	}, {
		name: "misspelt top-level key",
		args: []string{"--set", "schedular.replicas=1"},
		want: "- at '': additional properties 'schedular' not allowed",
	}, {
		name: "image digest",
		args: []string{"--set", "scheduler.image.digest=latest"},
		want: "- at '/scheduler/image/digest': 'latest' does not match pattern",
	}, {
		name: "privileged webhook port",
		args: []string{"--set", "webhook.port=443"},
		want: "- at '/webhook/port': minimum: got 443, want 1,024",
	}, {
		name: "default namespace",
		args: []string{"--namespace", "default"},
		want: `install into a namespace of its own, not "default"`,
	}, {
		name: "helm test in the release namespace, which the webhooks skip",
		args: []string{"--namespace", "gpu-x", "--set", "tests.namespace=gpu-x"},
		want: "tests.namespace must not be the release namespace gpu-x",
	}, {
		name: "scheduler user the webhook's match condition cannot hold",
		args: []string{"--set", "webhook.extraSchedulerUsers={x'] || true || ['}"},
		want: `scheduler user "x'] || true || ['" contains a quote, a backslash or a control character`,
	}, {
		name: "host path mode without a library directory",
		args: []string{"--set", "agent.nvml.mode=hostPath", "--set", "agent.nvml.hostPath.libraryDir="},
		want: "agent.nvml.mode is hostPath but agent.nvml.hostPath.libraryDir is empty",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := template(t, tc.args...)
			if err == nil {
				t.Fatalf("helm template %v succeeded, want an error containing %q; it printed:\n%.2000s", tc.args, tc.want, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template %v: want an error containing\n  %s\ngot:\n  %v", tc.args, tc.want, err)
			}
		})
	}
}

// The chart carries a copy of scheduler/config/scheduler-config.yaml: the two must not drift.
func TestSchedulerConfigFileInSync(t *testing.T) {
	chartCopy := filepath.Join(chartDir(t), "files", "scheduler-config.yaml")
	if *update {
		if err := os.WriteFile(chartCopy, config.DefaultYAML, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(chartCopy)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, config.DefaultYAML) {
		t.Fatalf("%s differs from scheduler/config/scheduler-config.yaml (go test ./test/chart -update copies it):\n%s",
			chartCopy, lineDiff(string(config.DefaultYAML), string(got)))
	}
}

// The ConfigMap the chart renders is the shipped configuration, loaded by the kube-scheduler's
// own loader, with only the release's namespace and the user's overrides applied.
func TestSchedulerConfigMatchesShipped(t *testing.T) {
	shipped := loadSchedulerConfig(t, config.DefaultYAML)

	t.Run("default values", func(t *testing.T) {
		// The chart's default, the device plugin, adds its resource name to the plugin args
		// (admitgate.go); the shipped file, which the simulator runs, has none.
		objs := parseObjects(t, mustTemplate(t))
		got := loadSchedulerConfig(t, configMapData(t, objs))
		if args := pluginArgs(t, got.Profiles[0].PluginConfig); ptr.Deref(args.DeviceResourceName, "") != "gpu.scheduling/gpu" {
			t.Errorf("deviceResourceName = %q, want the device plugin's gpu.scheduling/gpu", ptr.Deref(args.DeviceResourceName, ""))
		}
		objs = parseObjects(t, mustTemplate(t, "--set", "devicePlugin.enabled=false"))
		got = loadSchedulerConfig(t, configMapData(t, objs))
		if !equality.Semantic.DeepEqual(got, shipped) {
			t.Fatalf("the chart's scheduler configuration (devicePlugin.enabled=false) differs from scheduler/config/scheduler-config.yaml:\n%s",
				lineDiff(toYAML(t, shipped), toYAML(t, got)))
		}
	})

	t.Run("other namespace and overrides", func(t *testing.T) {
		objs := parseObjects(t, mustTemplate(t, "--namespace", "gpu-system",
			"--set", "scheduler.pluginArgs.nodeStrategy=spread",
			"--set", "scheduler.pluginArgs.statusFreshnessSeconds=90",
			"--set", "scheduler.clientConnection.qps=200",
			"--set", "scheduler.replicas=1", "--set", "scheduler.leaderElection.enabled=false"))
		got := loadSchedulerConfig(t, configMapData(t, objs))
		if got.LeaderElection.LeaderElect || got.LeaderElection.ResourceNamespace != "gpu-system" {
			t.Errorf("leader election = %+v, want off in gpu-system", got.LeaderElection)
		}
		if got.ClientConnection.QPS != 200 || got.ClientConnection.Burst != shipped.ClientConnection.Burst {
			t.Errorf("client connection = %+v, want qps 200 and the shipped burst", got.ClientConnection)
		}
		args := pluginArgs(t, got.Profiles[0].PluginConfig)
		if *args.LeaseNamespace != "gpu-system" || *args.NodeStrategy != "spread" || *args.StatusFreshnessSeconds != 90 {
			t.Errorf("plugin args = lease namespace %s, strategy %s, freshness %d; want gpu-system, spread, 90",
				*args.LeaseNamespace, *args.NodeStrategy, *args.StatusFreshnessSeconds)
		}
		want := pluginArgs(t, shipped.Profiles[0].PluginConfig)
		if *args.OrphanLeaseGraceSeconds != *want.OrphanLeaseGraceSeconds {
			t.Errorf("orphanLeaseGraceSeconds = %d, want the shipped %d", *args.OrphanLeaseGraceSeconds, *want.OrphanLeaseGraceSeconds)
		}
	})
}

// Without leader election several replicas run active-active (they divide the pods by their
// peer leases): the chart renders them, with leader election off in their configuration, in the
// Downward-API mode. With the device plugin it refuses, naming why: only one binding process
// can bind same-size pods to a node one at a time.
func TestActiveActiveReplicas(t *testing.T) {
	out, err := runHelm(t, nil, "template", releaseName, chartDir(t), "--namespace", releaseNamespace,
		"--set", "scheduler.replicas=3", "--set", "scheduler.leaderElection.enabled=false")
	if err == nil || !strings.Contains(out+err.Error(), "cannot be combined with devicePlugin.enabled") {
		t.Errorf("active-active replicas with the device plugin: err %v, output %q; want a refusal naming devicePlugin.enabled", err, out)
	}
	objs := parseObjects(t, mustTemplate(t, "--set", "scheduler.replicas=3", "--set", "scheduler.leaderElection.enabled=false", "--set", "devicePlugin.enabled=false"))
	if got := loadSchedulerConfig(t, configMapData(t, objs)); got.LeaderElection.LeaderElect {
		t.Error("leader election on in the configuration of active-active replicas")
	}
	var dep appsv1.Deployment
	into(t, find(t, objs, "Deployment", releaseName), &dep)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("scheduler replicas = %v, want 3", dep.Spec.Replicas)
	}
}

// TestFlowSchema: the scheduler's and gpu-controller's ServiceAccounts, and only theirs, are
// sent to workload-high; the values turn it off or move it.
func TestFlowSchema(t *testing.T) {
	objs := parseObjects(t, mustTemplate(t))
	var fs flowcontrolv1.FlowSchema
	into(t, find(t, objs, "FlowSchema", releaseName), &fs)
	var dep appsv1.Deployment
	into(t, find(t, objs, "Deployment", releaseName), &dep)
	var ctrl appsv1.Deployment
	into(t, find(t, objs, "Deployment", releaseName+"-controller"), &ctrl)
	if fs.Spec.PriorityLevelConfiguration.Name != "workload-high" || fs.Spec.MatchingPrecedence != 800 {
		t.Errorf("FlowSchema sends to %q at precedence %d, want workload-high at 800", fs.Spec.PriorityLevelConfiguration.Name, fs.Spec.MatchingPrecedence)
	}
	var subjects []string
	for _, r := range fs.Spec.Rules {
		for _, s := range r.Subjects {
			if s.Kind != flowcontrolv1.SubjectKindServiceAccount || s.ServiceAccount == nil || s.ServiceAccount.Namespace != releaseNamespace {
				t.Errorf("subject %+v is not a ServiceAccount of the release namespace", s)
				continue
			}
			subjects = append(subjects, s.ServiceAccount.Name)
		}
		if len(r.ResourceRules) != 1 || !r.ResourceRules[0].ClusterScope || len(r.NonResourceRules) != 0 {
			t.Errorf("rules %+v: want every resource request, cluster-scoped and namespaced", r)
		}
	}
	if want := []string{dep.Spec.Template.Spec.ServiceAccountName, ctrl.Spec.Template.Spec.ServiceAccountName}; !slices.Equal(subjects, want) {
		t.Errorf("FlowSchema subjects %v, want the scheduler's and the controller's ServiceAccounts %v", subjects, want)
	}

	objs = parseObjects(t, mustTemplate(t, "--set", "controller.enabled=false", "--set", "flowSchema.priorityLevel=exempt-not", "--set", "flowSchema.matchingPrecedence=500"))
	into(t, find(t, objs, "FlowSchema", releaseName), &fs)
	if n := len(fs.Spec.Rules[0].Subjects); n != 1 || fs.Spec.PriorityLevelConfiguration.Name != "exempt-not" || fs.Spec.MatchingPrecedence != 500 {
		t.Errorf("without the controller: %d subjects, level %q, precedence %d", n, fs.Spec.PriorityLevelConfiguration.Name, fs.Spec.MatchingPrecedence)
	}
	for _, o := range parseObjects(t, mustTemplate(t, "--set", "flowSchema.enabled=false")) {
		if o.GetKind() == "FlowSchema" {
			t.Errorf("flowSchema.enabled=false still renders FlowSchema %s", o.GetName())
		}
	}
	if _, err := template(t, "--set", "flowSchema.matchingPrecedence=0"); err == nil {
		t.Error("matchingPrecedence 0 accepted; the apiserver takes 1-10000")
	}
}

func configMapData(t *testing.T, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	var cm corev1.ConfigMap
	into(t, find(t, objs, "ConfigMap", releaseName+"-config"), &cm)
	data, ok := cm.Data["scheduler-config.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s has no scheduler-config.yaml", cm.Name)
	}
	return []byte(data)
}

// loadSchedulerConfig loads a KubeSchedulerConfiguration the way kube-scheduler --config does
// (strict decoding, defaulting) and checks the GpuClaimPlugin args the way the plugin does.
func loadSchedulerConfig(t *testing.T, data []byte) *schedconfig.KubeSchedulerConfiguration {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := options.LoadConfigFromFile(klog.Background(), path)
	if err != nil {
		t.Fatalf("kube-scheduler refuses the configuration: %v\n%s", err, data)
	}
	if errs := schedvalidation.ValidateKubeSchedulerConfiguration(cfg); errs != nil {
		t.Fatalf("invalid scheduler configuration: %v\n%s", errs, data)
	}
	for _, p := range cfg.Profiles {
		pluginArgs(t, p.PluginConfig)
	}
	return cfg
}

// pluginArgs decodes and validates the GpuClaimPlugin args of a profile, failing when absent.
func pluginArgs(t *testing.T, pcs []schedconfig.PluginConfig) *gpuclaim.Args {
	t.Helper()
	for _, pc := range pcs {
		if pc.Name != gpuclaim.Name {
			continue
		}
		u, ok := pc.Args.(*runtime.Unknown)
		if !ok {
			t.Fatalf("%s args are %T, want raw", gpuclaim.Name, pc.Args)
		}
		var a gpuclaim.Args
		if err := yaml.UnmarshalStrict(u.Raw, &a); err != nil {
			t.Fatalf("%s args: %v", gpuclaim.Name, err)
		}
		gpuclaim.SetDefaultsArgs(&a)
		if err := gpuclaim.ValidateArgs(field.NewPath("args"), &a); err != nil {
			t.Fatalf("%s args: %v", gpuclaim.Name, err)
		}
		return &a
	}
	t.Fatalf("no %s pluginConfig", gpuclaim.Name)
	return nil
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// The webhook configurations are webhook/manifests.Render's, for the chart's Service and CA.
func TestWebhookConfigurationsMatchManifests(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		opts manifests.Options
	}{{
		name: "default values",
		// devicePlugin.enabled is the default: the Job webhook is rendered.
		opts: manifests.Options{Namespace: releaseNamespace, JobResource: true,
			Service: &manifests.ServiceRef{Namespace: releaseNamespace, Name: releaseName + "-webhook", Port: 443}},
	}, {
		name: "without the device plugin",
		args: []string{"--set", "devicePlugin.enabled=false"},
		opts: manifests.Options{Namespace: releaseNamespace,
			Service: &manifests.ServiceRef{Namespace: releaseNamespace, Name: releaseName + "-webhook", Port: 443}},
	}, {
		name: "other namespace, timeout, exclusions, scheduler users",
		args: []string{"--namespace", "gpu-system", "--set", "webhook.timeoutSeconds=2", "--set", "webhook.service.port=9443",
			"--set", "webhook.excludeNamespaces={monitoring,kube-system}", "--set", "scheduler.serviceAccount.name=sched",
			"--set", "webhook.extraSchedulerUsers={system:serviceaccount:other:gpu-scheduler,ops}"},
		opts: manifests.Options{Namespace: "gpu-system", TimeoutSeconds: 2, ExcludeNamespaces: []string{"monitoring", "kube-system"}, JobResource: true,
			Service: &manifests.ServiceRef{Namespace: "gpu-system", Name: releaseName + "-webhook", Port: 9443}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := parseObjects(t, mustTemplate(t, tc.args...))
			var gotM admissionregistrationv1.MutatingWebhookConfiguration
			var gotV admissionregistrationv1.ValidatingWebhookConfiguration
			into(t, find(t, objs, "MutatingWebhookConfiguration", releaseName+"-webhook"), &gotM)
			into(t, find(t, objs, "ValidatingWebhookConfiguration", releaseName+"-webhook"), &gotV)

			opts := tc.opts
			opts.Name = releaseName + "-webhook"
			// The chart leaves the CA bundles to the webhook's rotator: none rendered.
			opts.CABundle = []byte("written by the webhook")
			// The scheduler identity the webhook Deployment runs with, so that the configuration
			// keeps exactly its Bindings from the webhook.
			opts.Scheduler = webhookSchedulerIdentity(t, objs)
			if len(opts.Scheduler.Users) == 0 {
				t.Fatal("the webhook Deployment passes no --scheduler-users")
			}
			wantM, wantV, err := manifests.Render(opts)
			if err != nil {
				t.Fatal(err)
			}
			for i := range wantM.Webhooks {
				wantM.Webhooks[i].ClientConfig.CABundle = nil
			}
			for i := range wantV.Webhooks {
				wantV.Webhooks[i].ClientConfig.CABundle = nil
			}
			if !equality.Semantic.DeepEqual(gotM.Webhooks, wantM.Webhooks) {
				t.Errorf("mutating webhooks differ from webhook/manifests:\n%s", lineDiff(toYAML(t, wantM.Webhooks), toYAML(t, gotM.Webhooks)))
			}
			if !equality.Semantic.DeepEqual(gotV.Webhooks, wantV.Webhooks) {
				t.Errorf("validating webhooks differ from webhook/manifests:\n%s", lineDiff(toYAML(t, wantV.Webhooks), toYAML(t, gotV.Webhooks)))
			}
		})
	}
}

// webhookSchedulerIdentity is the --scheduler-users and --scheduler-groups of the rendered
// webhook Deployment, parsed as gpu-webhook parses them.
func webhookSchedulerIdentity(t *testing.T, objs []*unstructured.Unstructured) webhook.SchedulerIdentity {
	t.Helper()
	spec, ok := podSpecOf(t, find(t, objs, "Deployment", releaseName+"-webhook"))
	if !ok {
		t.Fatal("the webhook is not a Deployment")
	}
	var id webhook.SchedulerIdentity
	fs := pflag.NewFlagSet("gpu-webhook", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.StringSliceVar(&id.Users, "scheduler-users", webhook.DefaultConfig().Scheduler.Users, "")
	fs.StringSliceVar(&id.Groups, "scheduler-groups", webhook.DefaultConfig().Scheduler.Groups, "")
	if err := fs.Parse(spec.Containers[0].Args); err != nil {
		t.Fatalf("webhook args %q: %v", spec.Containers[0].Args, err)
	}
	return id
}

// Without cert-manager the chart renders no certificate: an empty Secret for the webhook's
// rotator, no caBundle, and the rotator's flags on the webhook with that Secret mounted where the
// webhook reads its certificate. So two renders are the same, as Argo CD (no lookup) needs.
func TestWebhookCertificate(t *testing.T) {
	first := mustTemplate(t)
	if second := mustTemplate(t); second != first {
		t.Fatalf("two renders of the chart differ (a certificate made at render time?):\n%s", lineDiff(first, second))
	}
	objs := parseObjects(t, first)
	secretName := releaseName + "-webhook-cert"
	var secret corev1.Secret
	into(t, find(t, objs, "Secret", secretName), &secret)
	if len(secret.Data)+len(secret.StringData) != 0 || secret.Type != corev1.SecretTypeOpaque {
		t.Errorf("Secret %s: type %q with keys %v; want an empty Opaque Secret that only the webhook fills", secretName, secret.Type, slices.Sorted(maps.Keys(secret.Data)))
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	into(t, find(t, objs, "MutatingWebhookConfiguration", releaseName+"-webhook"), &mwc)
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	into(t, find(t, objs, "ValidatingWebhookConfiguration", releaseName+"-webhook"), &vwc)
	for _, w := range mwc.Webhooks {
		if len(w.ClientConfig.CABundle) != 0 {
			t.Errorf("mutating webhook %s has a rendered caBundle; the webhook writes it", w.Name)
		}
	}
	for _, w := range vwc.Webhooks {
		if len(w.ClientConfig.CABundle) != 0 {
			t.Errorf("validating webhook %s has a rendered caBundle; the webhook writes it", w.Name)
		}
	}

	spec, _ := podSpecOf(t, find(t, objs, "Deployment", releaseName+"-webhook"))
	args := spec.Containers[0].Args
	svc := releaseName + "-webhook"
	for _, want := range []string{"--cert-secret=" + releaseNamespace + "/" + secretName, "--cert-service=" + releaseNamespace + "/" + svc,
		"--inject-ca-into=" + svc, "--ca-validity=87600h", "--cert-validity=8760h", "--cert-renew-before=2160h"} {
		if !slices.Contains(args, want) {
			t.Errorf("webhook args %q lack %s", args, want)
		}
	}
	certDir := ""
	for _, a := range args {
		if f, ok := strings.CutPrefix(a, "--tls-cert-file="); ok {
			certDir = filepath.Dir(f)
		}
	}
	mounted := false
	for _, m := range spec.Containers[0].VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secretName && m.MountPath == certDir {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("Secret %s is not mounted at %q, the folder of --tls-cert-file", secretName, certDir)
	}
	if spec.Containers[0].StartupProbe == nil {
		t.Error("the webhook has no startupProbe: its liveness probe would restart it while it waits for its first certificate to be mounted")
	}

	t.Run("renewal before the end", func(t *testing.T) {
		_, err := template(t, "--set", "webhook.tls.renewBeforeDays=365")
		if err == nil || !strings.Contains(err.Error(), "webhook.tls.renewBeforeDays (365) must be less than webhook.tls.certValidityDays (365)") {
			t.Errorf("renewBeforeDays = certValidityDays: %v", err)
		}
	})

	t.Run("cert-manager", func(t *testing.T) {
		objs := parseObjects(t, mustTemplate(t, "--set", "webhook.certManager.enabled=true"))
		for _, o := range objs {
			if o.GetKind() == "Secret" {
				t.Errorf("with cert-manager the chart renders Secret %s; cert-manager owns it", o.GetName())
			}
			if strings.HasSuffix(o.GetName(), "-webhook-cert") {
				t.Errorf("with cert-manager the chart renders the rotator's %s %s", o.GetKind(), o.GetName())
			}
		}
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			o := find(t, objs, kind, releaseName+"-webhook")
			if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != releaseNamespace+"/"+releaseName+"-webhook" {
				t.Errorf("%s inject-ca-from = %q", kind, got)
			}
		}
		find(t, objs, "Certificate", releaseName+"-webhook")
		find(t, objs, "Issuer", releaseName+"-webhook-selfsigned")
		spec, _ := podSpecOf(t, find(t, objs, "Deployment", releaseName+"-webhook"))
		for _, a := range spec.Containers[0].Args {
			if strings.HasPrefix(a, "--cert-secret") {
				t.Errorf("with cert-manager the webhook still rotates its own certificate: %s", a)
			}
		}
	})
}

// verifyServingCert checks that tls.crt chains to ca.crt for dnsName and that tls.key is its key.
func verifyServingCert(t testing.TB, data map[string][]byte, dnsName string) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	block, _ := pem.Decode(data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("serving certificate for %s: %v", dnsName, err)
	}
	if _, err := tls.X509KeyPair(data["tls.crt"], data["tls.key"]); err != nil {
		t.Fatalf("tls.key does not match tls.crt: %v", err)
	}
}

// podSpecOf returns the pod template of a Deployment or DaemonSet; ok is false for other kinds.
func podSpecOf(t *testing.T, o *unstructured.Unstructured) (corev1.PodSpec, bool) {
	t.Helper()
	switch o.GetKind() {
	case "Deployment":
		var d appsv1.Deployment
		into(t, o, &d)
		return d.Spec.Template.Spec, true
	case "DaemonSet":
		var d appsv1.DaemonSet
		into(t, o, &d)
		return d.Spec.Template.Spec, true
	}
	return corev1.PodSpec{}, false
}

// Every container runs with the secure defaults, and every workload has resource requests.
func TestSecureDefaults(t *testing.T) {
	objs := parseObjects(t, mustTemplate(t))
	workloads := 0
	for _, o := range objs {
		spec, ok := podSpecOf(t, o)
		if !ok {
			continue
		}
		workloads++
		where := o.GetKind() + " " + o.GetName()
		if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
			psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod security context %+v, want runAsNonRoot and seccomp RuntimeDefault", where, psc)
		}
		if spec.ServiceAccountName == "" || spec.ServiceAccountName == "default" {
			t.Errorf("%s runs as the default service account", where)
		}
		for _, c := range spec.Containers {
			sc := c.SecurityContext
			// The one exception: the agent serves the device plugin (the default mode), whose
			// socket goes into the kubelet's root-only (0750) directory, so it runs as root,
			// with nothing else: no privilege, no capability, a read-only root filesystem.
			nonRoot := sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot
			if o.GetKind() == "DaemonSet" && sc != nil && sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
				nonRoot = true
			}
			if sc == nil || !nonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged != nil && *sc.Privileged ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
				sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s container %s: security context %s is not the secure default", where, c.Name, toYAML(t, sc))
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s container %s: resources %+v, want cpu and memory requests and a memory limit", where, c.Name, c.Resources)
			}
			if c.LivenessProbe == nil {
				t.Errorf("%s container %s has no liveness probe", where, c.Name)
			}
		}
	}
	if workloads != 4 {
		t.Errorf("rendered %d workloads, want 4 (scheduler, webhook, controller, agent)", workloads)
	}
}

// The chart's pod device-access policy is webhook/manifests.RenderPodPolicy's, for the release
// namespace, the resource and the exempt namespaces of the values; it exists only in the
// device-plugin mode.
func TestPodPolicyMatchesManifests(t *testing.T) {
	name := releaseName + "-webhook-pod-device-access"
	if objs := parseObjects(t, mustTemplate(t, "--set", "devicePlugin.enabled=false")); len(findAll(objs, "ValidatingAdmissionPolicy", name)) != 0 {
		t.Error("the pod policy is rendered without devicePlugin.enabled")
	}
	for _, tc := range []struct {
		name string
		args []string
		opts manifests.PodPolicyOptions
	}{{
		name: "device plugin",
		args: []string{"--set", "devicePlugin.enabled=true", "--set", "devicePlugin.resourceName=nvidia.com/gpu"},
		opts: manifests.PodPolicyOptions{ResourceName: "nvidia.com/gpu", Namespace: releaseNamespace},
	}, {
		name: "own resource, exemptions",
		args: []string{"--namespace", "gpu-system", "--set", "devicePlugin.enabled=true", "--set", "devicePlugin.resourceName=gpu.scheduling/gpu",
			"--set", "webhook.podPolicy.exemptNamespaces={gpu-operator,kube-system}"},
		opts: manifests.PodPolicyOptions{ResourceName: "gpu.scheduling/gpu", Namespace: "gpu-system", ExemptNamespaces: []string{"gpu-operator"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := parseObjects(t, mustTemplate(t, tc.args...))
			var gotP admissionregistrationv1.ValidatingAdmissionPolicy
			var gotB admissionregistrationv1.ValidatingAdmissionPolicyBinding
			into(t, find(t, objs, "ValidatingAdmissionPolicy", name), &gotP)
			into(t, find(t, objs, "ValidatingAdmissionPolicyBinding", name), &gotB)
			opts := tc.opts
			opts.Name = name
			wantP, wantB, err := manifests.RenderPodPolicy(opts)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(gotP.Spec, wantP.Spec) {
				t.Errorf("pod policy differs from webhook/manifests:\n%s", lineDiff(toYAML(t, wantP.Spec), toYAML(t, gotP.Spec)))
			}
			if !equality.Semantic.DeepEqual(gotB.Spec, wantB.Spec) {
				t.Errorf("pod policy binding differs from webhook/manifests:\n%s", lineDiff(toYAML(t, wantB.Spec), toYAML(t, gotB.Spec)))
			}
		})
	}
	if objs := parseObjects(t, mustTemplate(t, "--set", "devicePlugin.enabled=true", "--set", "webhook.podPolicy.enabled=false")); len(findAll(objs, "ValidatingAdmissionPolicy", name)) != 0 {
		t.Error("the pod policy is rendered with webhook.podPolicy.enabled=false")
	}
}

func findAll(objs []*unstructured.Unstructured, kind, name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			out = append(out, o)
		}
	}
	return out
}
