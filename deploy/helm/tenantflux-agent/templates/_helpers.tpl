{{/* The agent's image reference; the tag defaults to the chart's appVersion. */}}
{{- define "tenantflux-agent.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
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
