{{/*
The apiVersion of the requester policy (MutatingAdmissionPolicy and its binding): the value
admissionPolicies.mutatingAPIVersion when set, else the newest version the cluster serves. Kubernetes
1.36 and later serve admissionregistration.k8s.io/v1; 1.35 serves v1beta1 only where the cluster turned
it on. A cluster that serves neither cannot record who asked for a ToolCall, so the install stops here,
before anything is created.
*/}}
{{- define "toolgate.mutatingAdmissionAPIVersion" -}}
{{- $want := .Values.admissionPolicies.mutatingAPIVersion -}}
{{- if not $want -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
{{- $want = "v1" -}}
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" -}}
{{- $want = "v1beta1" -}}
{{- else -}}
{{- fail (printf "Toolgate needs MutatingAdmissionPolicy to record who asked for each ToolCall (spec.requester), and this cluster (Kubernetes %s) serves neither admissionregistration.k8s.io/v1 (Kubernetes 1.36 and later) nor v1beta1 (Kubernetes 1.35, with kube-apiserver --runtime-config=admissionregistration.k8s.io/v1beta1=true --feature-gates=MutatingAdmissionPolicy=true). Nothing was installed. Upgrade the cluster or turn v1beta1 on; set admissionPolicies.mutatingAPIVersion (v1 or v1beta1) only to choose without asking the cluster, as helm template does." .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- end -}}
admissionregistration.k8s.io/{{ $want }}
{{- end -}}
