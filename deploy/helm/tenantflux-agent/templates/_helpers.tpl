{{/* The agent's image reference; the tag defaults to the chart's appVersion. */}}
{{- define "tenantflux-agent.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
