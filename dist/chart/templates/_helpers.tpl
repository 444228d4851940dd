{{/* The labels of every object of the release. */}}
{{- define "toolgate.labels" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The labels that select the manager's Pods. */}}
{{- define "toolgate.managerSelector" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/instance: {{ .Release.Name }}
control-plane: controller-manager
{{- end -}}

{{/* The labels that select the MCP gateway's Pods. */}}
{{- define "toolgate.gatewaySelector" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: mcp-gateway
{{- end -}}

{{/* An image reference: repository@digest when a digest is given, otherwise repository:tag, the tag
defaulting to the chart's appVersion. */}}
{{- define "toolgate.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The namespace the MCP gateway serves. */}}
{{- define "toolgate.gatewayNamespace" -}}
{{- .Values.mcpGateway.namespace | default .Release.Namespace -}}
{{- end -}}

{{/* The Pod security context of every Pod of the release: the restricted Pod Security Standard. */}}
{{- define "toolgate.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "toolgate.containerSecurityContext" -}}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop:
  - ALL
{{- end -}}
