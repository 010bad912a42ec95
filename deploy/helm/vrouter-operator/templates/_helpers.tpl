{{/* The chart name, overridable. */}}
{{- define "vrouter-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The base name of every resource: fullnameOverride, else the release name,
suffixed with the chart name unless the release name already contains it.
Truncated to 63 characters because some Kubernetes name fields are limited.
*/}}
{{- define "vrouter-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "vrouter-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator's pods; never change between upgrades. */}}
{{- define "vrouter-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vrouter-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "vrouter-operator.labels" -}}
helm.sh/chart: {{ include "vrouter-operator.chart" . }}
{{ include "vrouter-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The webhook Service; also the serving certificate's DNS name. */}}
{{- define "vrouter-operator.webhookService" -}}
{{- printf "%s-webhook" (include "vrouter-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret holding the webhook serving certificate (tls.crt, tls.key). */}}
{{- define "vrouter-operator.webhookCertSecret" -}}
{{- printf "%s-webhook-tls" (include "vrouter-operator.fullname" .) }}
{{- end }}
