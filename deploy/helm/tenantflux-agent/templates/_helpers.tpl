{{/* The agent's image reference; the tag defaults to the chart's appVersion. */}}
{{- define "tenantflux-agent.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* helm.sh/chart: the chart's name and version, as a label value (no "+", at most 63). */}}
{{- define "tenantflux-agent.chart" -}}
{{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels of every object the chart renders, after its own app.kubernetes.io/name: the
  release's (deploy/manifests/generate leaves out those naming a Helm release) and the
  platform's commonLabels. */}}
{{- define "tenantflux-agent.labels" -}}
app.kubernetes.io/part-of: tenantflux
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "tenantflux-agent.chart" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The rules every caller of the agent needs (Roles tenantflux-user and tenantflux-client). */}}
{{- define "tenantflux-agent.callerRules" }}
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list"]
  # A port-forward over WebSockets (the plugin's, and kubectl's since 1.31) is a GET;
  # Kubernetes 1.35+ also checks create on the upgrade.
  - apiGroups: [""]
    resources: ["pods/portforward"]
    verbs: ["get", "create"]
  # Before sending a token to a pod with the agent's labels, the plugin checks that the pod
  # belongs to the agent's Deployment (through its ReplicaSet).
  - apiGroups: ["apps"]
    resources: ["deployments"]
    resourceNames: ["tenantflux-agent"]
    verbs: ["get"]
  - apiGroups: ["apps"]
    resources: ["replicasets"]
    verbs: ["get"]
  - apiGroups: ["tenantflux.io"]
    resources: ["agents/status"]
    verbs: ["get"]
  # Read the platform's policy (`policy show`); pushing one needs `update` on policies, which
  # only the management side's account is given.
  - apiGroups: ["tenantflux.io"]
    resources: ["policies"]
    verbs: ["get"]
  # The agent's record of the flux-operator install and the Events about it
  # (kubectl -n {{ .Values.namespace }} describe configmap tenantflux-operator-install).
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: ["tenantflux-operator-install"]
    verbs: ["get"]
  - apiGroups: ["", "events.k8s.io"]
    resources: ["events"]
    verbs: ["get", "list", "watch"]
{{- end }}
