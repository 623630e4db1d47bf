{{/* The chart's name, or nameOverride. */}}
{{- define "pulumi-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name, at most 63 characters (a DNS label): the names of every object.
fullnameOverride replaces it; else the release name, followed by the chart's name unless it
contains it already (Helm's own scaffold). */}}
{{- define "pulumi-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "pulumi-operator.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the operator's pods; never change them (a Deployment's selector is immutable). */}}
{{- define "pulumi-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pulumi-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "pulumi-operator.labels" -}}
{{ include "pulumi-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name (.Chart.Version | replace "+" "_") }}
{{- end -}}

{{- define "pulumi-operator.serviceAccountName" -}}
{{- default (include "pulumi-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The Secret holding passphrase and backend-url: the user's, or the chart's own. */}}
{{- define "pulumi-operator.secretName" -}}
{{- if .Values.existingSecret -}}
{{- .Values.existingSecret -}}
{{- else -}}
{{- printf "%s-secrets" (include "pulumi-operator.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the metrics server's certificate (tls.crt, tls.key and the CA's
ca.crt): metrics.tls.secretName, else the chart's own when a ServiceMonitor scrapes over HTTPS
(metrics.yaml makes it); empty otherwise, and the operator makes a self-signed one at start. */}}
{{- define "pulumi-operator.metricsTLSSecret" -}}
{{- if .Values.metrics.secure -}}
{{- if .Values.metrics.tls.secretName -}}
{{- .Values.metrics.tls.secretName -}}
{{- else if .Values.metrics.serviceMonitor.enabled -}}
{{- printf "%s-metrics-tls" (include "pulumi-operator.fullname" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The metrics Service's DNS name in the cluster: what the metrics certificate names and what
the ServiceMonitor verifies it by. */}}
{{- define "pulumi-operator.metricsHost" -}}
{{- printf "%s-metrics.%s.svc" (include "pulumi-operator.fullname" .) .Release.Namespace -}}
{{- end -}}

{{- define "pulumi-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Fails the render on values that cannot work together, with what to do about it. */}}
{{- define "pulumi-operator.validate" -}}
{{- $creds := .Values.backendCredentials | default dict -}}
{{- if and .Values.existingSecret (or .Values.passphrase .Values.backendURL $creds.pgpassword $creds.awsAccessKeyID $creds.awsSecretAccessKey) -}}
{{- fail "existingSecret is set: put the passphrase, backend URL and credentials in that Secret (keys passphrase, backend-url, pgpassword, aws-access-key-id, aws-secret-access-key) and leave passphrase, backendURL and backendCredentials empty" -}}
{{- end -}}
{{- if not (or .Values.existingSecret .Values.passphrase) -}}
{{- fail "set passphrase (it encrypts the stacks' secrets; keep a copy) or existingSecret (a Secret with key passphrase)" -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled: two operators must never run Pulumi on the same stack" -}}
{{- end -}}
{{- end -}}
