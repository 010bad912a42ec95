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

{{/*
The CRD checks, run before Helm changes anything (templates/crds-check.yaml).
Helm itself refuses a CRD that exists without this release's ownership
("invalid ownership metadata") without saying what to do, and deletes, with
every object of their kinds, CRDs a release had as templates and no longer
renders. These checks refuse both with the step that avoids them. `lookup`
sees nothing in `helm template` and client-side dry runs: nothing is checked
there. A first install with crds.install=false can delete nothing and looks
nothing up (its user may not be allowed to list CRDs).
*/}}
{{- define "vrouter-operator.crdsCheck" -}}
{{- if or .Values.crds.install .Release.IsUpgrade }}
{{- $found := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "" }}
{{- $unowned := list }}
{{- $foreign := list }}
{{- $unkept := list }}
{{- range $crd := dig "items" list $found }}
{{- if eq (dig "spec" "group" "" $crd) "vrouter.kojuro.date" }}
{{- $name := dig "metadata" "name" "" $crd }}
{{- $annotations := dig "metadata" "annotations" dict $crd }}
{{- $release := get $annotations "meta.helm.sh/release-name" }}
{{- $namespace := get $annotations "meta.helm.sh/release-namespace" }}
{{- $managedBy := dig "metadata" "labels" "app.kubernetes.io/managed-by" "" $crd }}
{{- if not $release }}
{{- $unowned = append $unowned $name }}
{{- else if or (ne $release $.Release.Name) (ne $namespace $.Release.Namespace) }}
{{- $foreign = append $foreign (printf "%s (release %s in namespace %s)" $name $release $namespace) }}
{{- else if ne $managedBy "Helm" }}
{{- $unowned = append $unowned $name }}
{{- else if ne (get $annotations "helm.sh/resource-policy") "keep" }}
{{- $unkept = append $unkept $name }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.crds.install }}
{{- include "vrouter-operator.crdsUnowned" (list . $unowned) }}
{{- include "vrouter-operator.crdsForeign" (list . $foreign) }}
{{- else }}
{{- include "vrouter-operator.crdsUnkept" (list . $unkept) }}
{{- end }}
{{- end }}
{{- end }}

{{/* CRDs no Helm release owns: installed with kubectl, or from the crds/ directory of chart 0.1.0. */}}
{{- define "vrouter-operator.crdsUnowned" -}}
{{- $root := index . 0 }}
{{- $names := index . 1 | join " " }}
{{- if $names }}
{{- fail (printf `
CRDs %s exist without Helm's ownership labels (installed with kubectl, or from the crds/ directory of chart 0.1.0), so Helm cannot upgrade them. Nothing was changed. Adopt them into release %s, then run the same helm command again:
  kubectl label crd %s app.kubernetes.io/managed-by=Helm --overwrite
  kubectl annotate crd %s meta.helm.sh/release-name=%s meta.helm.sh/release-namespace=%s --overwrite
or leave them managed as they are with --set crds.install=false (docs/operations.md, "CRDs in the chart").` $names $root.Release.Name $names $names $root.Release.Name $root.Release.Namespace) }}
{{- end }}
{{- end }}

{{/* CRDs another Helm release owns. */}}
{{- define "vrouter-operator.crdsForeign" -}}
{{- $root := index . 0 }}
{{- $names := index . 1 | join ", " }}
{{- if $names }}
{{- fail (printf `
CRDs %s belong to another Helm release, so release %s in namespace %s cannot install them. Nothing was changed. Install this release with --set crds.install=false (the CRDs stay with their release), or upgrade that release instead (docs/operations.md, "CRDs in the chart").` $names $root.Release.Name $root.Release.Namespace) }}
{{- end }}
{{- end }}

{{/* This release's CRDs without the keep policy, which crds.install=false would delete. */}}
{{- define "vrouter-operator.crdsUnkept" -}}
{{- $root := index . 0 }}
{{- $names := index . 1 | join " " }}
{{- if $names }}
{{- fail (printf `
crds.install=false would make Helm delete CRDs %s, which release %s installed without the keep policy, and with them every object of their kinds. Nothing was changed. First run helm upgrade of release %s with crds.install=true and crds.keep=true (the defaults; it annotates them helm.sh/resource-policy=keep), then set crds.install=false.` $names $root.Release.Name $root.Release.Name) }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the pods run as, and the chart's roles bind. */}}
{{- define "vrouter-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "vrouter-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false (the existing ServiceAccount the operator runs as)" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
A listen address for port (list $ port): `:PORT` (every interface of both
families, operator/src/server/listen.rs) unless bindAddress names a host; an IPv6
host is bracketed.
*/}}
{{- define "vrouter-operator.listen" -}}
{{- $root := index . 0 }}
{{- $port := index . 1 }}
{{- $host := $root.Values.bindAddress }}
{{- if contains ":" $host }}
{{- printf "[%s]:%v" $host $port }}
{{- else }}
{{- printf "%s:%v" $host $port }}
{{- end }}
{{- end }}

{{/*
The pods' topologySpreadConstraints as YAML: the value when set, else one
over spread.topologyKey when replicas > 1 and spread.enabled, else nothing.
*/}}
{{- define "vrouter-operator.topologySpread" -}}
{{- if .Values.topologySpreadConstraints }}
{{- toYaml .Values.topologySpreadConstraints }}
{{- else if and .Values.spread.enabled (gt (int .Values.replicas) 1) }}
- maxSkew: 1
  topologyKey: {{ .Values.spread.topologyKey }}
  whenUnsatisfiable: {{ .Values.spread.whenUnsatisfiable }}
  labelSelector:
    matchLabels:
      {{- include "vrouter-operator.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}

{{/*
Where the webhook serving certificate comes from: certManager when
webhook.certManager.enabled (the older switch), manual when a caBundle is
given, otherwise webhook.certificates.
*/}}
{{- define "vrouter-operator.certSource" -}}
{{- if .Values.webhook.certManager.enabled -}}
certManager
{{- else if .Values.webhook.caBundle -}}
manual
{{- else -}}
{{- .Values.webhook.certificates -}}
{{- end -}}
{{- end }}
