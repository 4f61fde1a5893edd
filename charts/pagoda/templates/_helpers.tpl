{{/*
pagoda.name: the chart name, or .Values.nameOverride; at most 63 characters (a label value).
*/}}
{{- define "pagoda.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
pagoda.fullname: the name of every resource: .Values.fullnameOverride, else
"<release>-<chart>" (just the release name when it already contains the chart name).
*/}}
{{- define "pagoda.fullname" -}}
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

{{/*
pagoda.chart: "<chart>-<version>" for the helm.sh/chart label.
*/}}
{{- define "pagoda.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
pagoda.labels: the recommended labels on every resource of the release.
*/}}
{{- define "pagoda.labels" -}}
helm.sh/chart: {{ include "pagoda.chart" . }}
app.kubernetes.io/name: {{ include "pagoda.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pagoda
{{- end }}

{{/*
pagoda.operator.selectorLabels: the labels that select the operator's pods (immutable in
a Deployment's selector, so never the version).
*/}}
{{- define "pagoda.operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pagoda.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
pagoda.operator.labels: pagoda.labels plus the operator component.
*/}}
{{- define "pagoda.operator.labels" -}}
{{ include "pagoda.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
pagoda.serviceAccountName: the operator's ServiceAccount.
*/}}
{{- define "pagoda.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pagoda.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
pagoda.operator.image: "<repository>:<tag>", the tag defaulting to the chart's appVersion.
*/}}
{{- define "pagoda.operator.image" -}}
{{- printf "%s:%s" .Values.operator.image.repository (default .Chart.AppVersion .Values.operator.image.tag) }}
{{- end }}

{{/*
pagoda.engine.image: the default engine image, "<repository>:<tag>" as for the operator.
*/}}
{{- define "pagoda.engine.image" -}}
{{- printf "%s:%s" .Values.engine.image.repository (default .Chart.AppVersion .Values.engine.image.tag) }}
{{- end }}

{{/*
pagoda.router.image: the default router image: the operator's unless router.image names one.
*/}}
{{- define "pagoda.router.image" -}}
{{- if .Values.router.image.repository }}
{{- printf "%s:%s" .Values.router.image.repository (default .Chart.AppVersion .Values.router.image.tag) }}
{{- else }}
{{- include "pagoda.operator.image" . }}
{{- end }}
{{- end }}

{{/*
pagoda.peeringName: the ClusterKopfPeering the operator replicas share.
*/}}
{{- define "pagoda.peeringName" -}}
{{- include "pagoda.fullname" . }}
{{- end }}
