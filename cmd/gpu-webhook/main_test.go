package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-scheduler/gpu-scheduler/webhook/webhooktest"
)

func TestRender(t *testing.T) {
	ca, err := webhooktest.NewCA("render-test")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"render", "--ca-bundle-file", caFile, "--namespace", "gpu-system", "--service-name", "gpu-webhook"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"kind: MutatingWebhookConfiguration", "kind: ValidatingWebhookConfiguration",
		"namespace: gpu-system", "name: gpu-webhook", "path: /mutate", "path: /validate", "port: 443",
		"- gpu-system",
		// The server's default scheduler identity.
		"name: not-a-scheduler-binding", "request.userInfo.username in ['system:serviceaccount:gpu-scheduler:gpu-scheduler']",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	if strings.Contains(out.String(), "job-gpu-request") {
		t.Errorf("the Job webhook is rendered without --job-resource:\n%s", out.String())
	}
	cmd = newCommand()
	out.Reset()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"render", "--ca-bundle-file", caFile, "--namespace", "gpu-system", "--service-name", "gpu-webhook", "--job-resource"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "name: job-gpu-request.gpu.scheduling") || !strings.Contains(out.String(), "- jobs") {
		t.Errorf("--job-resource: output lacks the Job webhook:\n%s", out.String())
	}

	// The server's identity flags.
	cmd = newCommand()
	out.Reset()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"render", "--ca-bundle-file", caFile, "--namespace", "gpu-system", "--service-name", "gpu-webhook",
		"--scheduler-users", "system:serviceaccount:gpu-system:sched,sched", "--scheduler-groups", "system:kube-scheduler"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{
		"request.userInfo.username in ['system:serviceaccount:gpu-system:sched', 'sched']",
		"request.userInfo.groups.exists(g, g in ['system:kube-scheduler'])",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	cmd = newCommand()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetArgs([]string{"render", "--ca-bundle-file", caFile, "--url", "https://127.0.0.1:1", "--scheduler-users", "x'"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `scheduler user "x'": contains a quote`) {
		t.Errorf("render with a quote in a scheduler user: %v", err)
	}
}

func TestServeRejectsBadFlags(t *testing.T) {
	cmd := newCommand()
	cmd.SetArgs([]string{"--visible-devices-env", "rocm"})
	if err := cmd.Execute(); err == nil || err.Error() != `visible devices env "rocm" is not one of cuda, nvidia, both, none` {
		t.Errorf("got %v", err)
	}
	// A kubeconfig (never dialled: the server fails before it calls anyone) for the /metrics guard.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd = newCommand()
	cmd.SetArgs([]string{"--kubeconfig", kubeconfig, "--tls-cert-file", "/nonexistent.crt"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "load serving certificate /nonexistent.crt") {
		t.Errorf("got %v", err)
	}
}
