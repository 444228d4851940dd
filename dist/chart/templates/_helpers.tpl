{{/* The labels of every object of the release. */}}
{{- define "toolgate.labels" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- include "toolgate.commonLabels" . }}
{{- end -}}

{{/* global.commonLabels and commonLabels (which wins), on every object and Pod of the release. */}}
{{- define "toolgate.commonLabels" -}}
{{- $labels := merge (dict) (.Values.commonLabels | default dict) ((.Values.global).commonLabels | default dict) }}
{{- with $labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The ServiceAccount the manager runs as: serviceAccount.name, or toolgate-controller-manager. */}}
{{- define "toolgate.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default "toolgate-controller-manager" -}}
{{- end -}}

{{/* The ServiceAccount the MCP gateway runs as: mcpGateway.serviceAccount.name, or toolgate-mcp. */}}
{{- define "toolgate.gatewayServiceAccountName" -}}
{{- .Values.mcpGateway.serviceAccount.name | default "toolgate-mcp" -}}
{{- end -}}

{{/* A ServiceAccount of the release, when its values (.sa) create it. */}}
{{- define "toolgate.serviceAccount" -}}
{{- if .sa.create }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "toolgate.labels" .root | nindent 4 }}
    {{- with .extraLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .sa.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- if not .sa.automountServiceAccountToken }}
automountServiceAccountToken: false
{{- end }}
{{- end }}
{{- end -}}

{{/* The pull Secrets of every Pod: global.imagePullSecrets, then imagePullSecrets. */}}
{{- define "toolgate.imagePullSecrets" -}}
{{- with concat ((.Values.global).imagePullSecrets | default list) (.Values.imagePullSecrets | default list) -}}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A PodDisruptionBudget's minAvailable or maxUnavailable (.pdb), minAvailable 1 when neither is set. */}}
{{- define "toolgate.disruptionBudget" -}}
{{- if hasKey .pdb "maxUnavailable" -}}
maxUnavailable: {{ .pdb.maxUnavailable | toJson }}
{{- else -}}
minAvailable: {{ hasKey .pdb "minAvailable" | ternary .pdb.minAvailable 1 | toJson }}
{{- end }}
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

{{/* The kubernetes.io/tls Secret the MCP gateway serves: mcpGateway.tls.secretName, toolgate-mcp-tls
when cert-manager makes it; "": plain HTTP. */}}
{{- define "toolgate.gatewayTLSSecret" -}}
{{- if .Values.mcpGateway.tls.certManager.enabled -}}
{{- .Values.mcpGateway.tls.secretName | default "toolgate-mcp-tls" -}}
{{- else -}}
{{- .Values.mcpGateway.tls.secretName -}}
{{- end -}}
{{- end -}}
