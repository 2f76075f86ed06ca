{{/*
Names. The release's objects are called <fullname> (the scheduler), <fullname>-webhook and
<fullname>-agent. With the default release name "gpu-scheduler" the fullname is "gpu-scheduler".
*/}}
{{- define "gpu-scheduler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-scheduler.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpu-scheduler.scheduler.fullname" -}}
{{- include "gpu-scheduler.fullname" . -}}
{{- end -}}

{{- define "gpu-scheduler.webhook.fullname" -}}
{{- printf "%s-webhook" (include "gpu-scheduler.fullname" .) -}}
{{- end -}}

{{- define "gpu-scheduler.agent.fullname" -}}
{{- printf "%s-agent" (include "gpu-scheduler.fullname" .) -}}
{{- end -}}

{{- define "gpu-scheduler.controller.fullname" -}}
{{- printf "%s-controller" (include "gpu-scheduler.fullname" .) -}}
{{- end -}}

{{- /*
The Secret with the webhook's serving certificate: cert-manager's (<fullname>-webhook-tls), or
the one the webhook's own rotator fills (<fullname>-webhook-cert). The names differ because the
chart's first versions rendered <fullname>-webhook-tls as a kubernetes.io/tls Secret with the
certificate in it, and a Secret's type cannot change on upgrade.
*/ -}}
{{- define "gpu-scheduler.webhook.tlsSecretName" -}}
{{- if .Values.webhook.certManager.enabled -}}
{{- printf "%s-tls" (include "gpu-scheduler.webhook.fullname" .) -}}
{{- else -}}
{{- printf "%s-cert" (include "gpu-scheduler.webhook.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* ServiceAccount names: the component's fullname unless set. */}}
{{- define "gpu-scheduler.scheduler.serviceAccountName" -}}
{{- default (include "gpu-scheduler.scheduler.fullname" .) .Values.scheduler.serviceAccount.name -}}
{{- end -}}

{{- define "gpu-scheduler.webhook.serviceAccountName" -}}
{{- default (include "gpu-scheduler.webhook.fullname" .) .Values.webhook.serviceAccount.name -}}
{{- end -}}

{{- define "gpu-scheduler.controller.serviceAccountName" -}}
{{- default (include "gpu-scheduler.controller.fullname" .) .Values.controller.serviceAccount.name -}}
{{- end -}}

{{- define "gpu-scheduler.agent.serviceAccountName" -}}
{{- default (include "gpu-scheduler.agent.fullname" .) .Values.agent.serviceAccount.name -}}
{{- end -}}

{{/* The user name the scheduler authenticates as: the only one the webhook lets write the allocation. */}}
{{- define "gpu-scheduler.scheduler.user" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpu-scheduler.scheduler.serviceAccountName" .) -}}
{{- end -}}

{{- define "gpu-scheduler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; "component" is scheduler, webhook, controller or agent. */}}
{{- define "gpu-scheduler.labels" -}}
helm.sh/chart: {{ include "gpu-scheduler.chart" .root }}
{{ include "gpu-scheduler.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: gpu-scheduler
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpu-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-scheduler.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* image: "repository:tag" (tag defaults to the chart's appVersion) or "repository@digest". */}}
{{- define "gpu-scheduler.image" -}}
{{- $img := .image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The secure defaults every container gets (non-root, read-only root filesystem, no privilege
escalation, every capability dropped, seccomp RuntimeDefault), merged under the component's own
securityContext values.
*/}}
{{- define "gpu-scheduler.containerSecurityContext" -}}
{{- $defaults := dict
  "runAsNonRoot" true
  "runAsUser" 65532
  "runAsGroup" 65532
  "readOnlyRootFilesystem" true
  "allowPrivilegeEscalation" false
  "capabilities" (dict "drop" (list "ALL"))
  "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- toYaml (mergeOverwrite $defaults (deepCopy (default dict .))) -}}
{{- end -}}

{{- define "gpu-scheduler.podSecurityContext" -}}
{{- $defaults := dict
  "runAsNonRoot" true
  "runAsUser" 65532
  "runAsGroup" 65532
  "fsGroup" 65532
  "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- toYaml (mergeOverwrite $defaults (deepCopy (default dict .))) -}}
{{- end -}}

{{/*
Installation checks that the schema cannot express (they span several values or the release).
*/}}
{{- define "gpu-scheduler.validate" -}}
{{- if and (eq .Release.Namespace "default") (not .Values.allowDefaultNamespace) -}}
{{- fail "gpu-scheduler: install into a namespace of its own, not \"default\": the webhooks skip the release namespace, so GPU pods in it would get no visible-devices variables and no allocation guard. Run: helm install gpu-scheduler charts/gpu-scheduler --namespace gpu-scheduler --create-namespace (or set allowDefaultNamespace=true if you really mean it)" -}}
{{- end -}}
{{- if and .Values.tests.enabled (eq .Values.tests.namespace .Release.Namespace) -}}
{{- fail (printf "gpu-scheduler: tests.namespace must not be the release namespace %s: the webhooks skip it, so helm test would fail. Set tests.namespace to a namespace the webhooks serve (default: default), or tests.enabled=false" .Release.Namespace) -}}
{{- end -}}
{{- if and .Values.devicePlugin.enabled (not .Values.scheduler.leaderElection.enabled) (gt (int .Values.scheduler.replicas) 1) -}}
{{- fail "gpu-scheduler: several scheduler replicas without leader election (active-active) cannot be combined with devicePlugin.enabled: the kubelet does not tell the device plugin which pod it admits, so pods of one GPU count must be bound to a node one at a time, which only one binding process can ensure (docs/security.md). Keep scheduler.leaderElection.enabled=true, or run one replica" -}}
{{- end -}}
{{- if and (eq .Values.agent.nvml.mode "hostPath") (not .Values.agent.nvml.hostPath.libraryDir) -}}
{{- fail "gpu-scheduler: agent.nvml.mode is hostPath but agent.nvml.hostPath.libraryDir is empty: name the host directory that holds libnvidia-ml.so.1" -}}
{{- end -}}
{{- end -}}
