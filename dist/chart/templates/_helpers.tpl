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

{{/* An image reference: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "toolgate.image" -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .chart.AppVersion) -}}
{{- end -}}

{{/* The mcp-call image of MCPServers that name none: mcpServers.executorImage, its repository
defaulting to the manager's with mcp-call as its last part, its tag to the manager's, then the
chart's appVersion. */}}
{{- define "toolgate.executorImage" -}}
{{- $e := (.Values.mcpServers | default dict).executorImage | default dict -}}
{{- $repository := $e.repository | default (printf "%smcp-call" (regexReplaceAll "[^/]*$" .Values.image.repository "")) -}}
{{- printf "%s:%s" $repository ($e.tag | default .Values.image.tag | default .Chart.AppVersion) -}}
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
