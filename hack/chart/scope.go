package main

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// clusterScopedResources are the resources, "plural.group", of the manifest's cluster-scoped CRDs: a
// Role cannot grant them, so the Roles of scope.namespaces leave them out.
func clusterScopedResources(objects []*unstructured.Unstructured) map[string]bool {
	out := map[string]bool{}
	for _, u := range objects {
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		scope, _, _ := unstructured.NestedString(u.Object, "spec", "scope")
		plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		if scope == "Cluster" {
			out[plural+"."+group] = true
		}
	}
	return out
}

// scopedOf is, for the manager's ClusterRole and its ClusterRoleBinding, what the chart renders in
// each namespace of scope.namespaces instead: a Role with the ClusterRole's rules on namespaced
// resources, a RoleBinding of that Role. It is nil for every other object.
func scopedOf(u *unstructured.Unstructured, clusterKinds map[string]bool) *unstructured.Unstructured {
	switch {
	case u.GetKind() == "ClusterRole" && u.GetName() == scopedRole:
		r := u.DeepCopy()
		r.SetKind("Role")
		rules, _, _ := unstructured.NestedSlice(u.Object, "rules")
		var kept []any
		for _, rule := range rules {
			rule := rule.(map[string]any)
			groups, _, _ := unstructured.NestedStringSlice(rule, "apiGroups")
			resources, _, _ := unstructured.NestedStringSlice(rule, "resources")
			resources = slices.DeleteFunc(resources, func(res string) bool {
				base, _, _ := strings.Cut(res, "/")
				return slices.ContainsFunc(groups, func(g string) bool { return clusterKinds[base+"."+g] })
			})
			if len(resources) == 0 {
				continue
			}
			rule = (&unstructured.Unstructured{Object: rule}).DeepCopy().Object
			_ = unstructured.SetNestedStringSlice(rule, resources, "resources")
			kept = append(kept, rule)
		}
		_ = unstructured.SetNestedSlice(r.Object, kept, "rules")
		return r
	case u.GetKind() == "ClusterRoleBinding":
		if ref, _, _ := unstructured.NestedString(u.Object, "roleRef", "name"); ref != scopedRole {
			return nil
		}
		b := u.DeepCopy()
		b.SetKind("RoleBinding")
		_ = unstructured.SetNestedField(b.Object, "Role", "roleRef", "kind")
		return b
	}
	return nil
}

// writeScoped writes u, rendered only without scope.namespaces, then scoped once per namespace of it.
func writeScoped(b *bytes.Buffer, u, scoped *unstructured.Unstructured) error {
	text, err := templateOf(u)
	if err != nil {
		return err
	}
	// templateOf puts a namespaced object in the release namespace; metadata comes before roleRef,
	// rules and subjects, so the first namespace is the object's own.
	inNamespace, err := templateOf(scoped)
	if err != nil {
		return err
	}
	own := "  namespace: {{ .Release.Namespace }}\n"
	meta := strings.Index(inNamespace, "\nmetadata:\n")
	next := strings.Index(inNamespace, "\nr") // roleRef or rules, after metadata
	if at := strings.Index(inNamespace, own); meta < 0 || at < meta || at > next {
		return fmt.Errorf("the namespace is not where the chart expects it")
	}
	inNamespace = strings.Replace(inNamespace, own, "  namespace: "+scopeNamespaceMarker+"\n", 1)
	// Inside the range, the release is $ and each namespace is the dot.
	inNamespace = strings.ReplaceAll(inNamespace, "{{ .Release.Namespace }}", "{{ $.Release.Namespace }}")
	inNamespace = strings.ReplaceAll(inNamespace, `include "toolgate.labels" .`, `include "toolgate.labels" $`)
	inNamespace = strings.ReplaceAll(inNamespace, `include "toolgate.serviceAccountName" .`, `include "toolgate.serviceAccountName" $`)
	inNamespace = strings.Replace(inNamespace, scopeNamespaceMarker, "{{ . }}", 1)
	fmt.Fprintf(b, "{{- if not .Values.scope.namespaces }}\n---\n%s{{- end }}\n", text)
	fmt.Fprintf(b, "{{- range .Values.scope.namespaces }}\n---\n%s{{- end }}\n", inNamespace)
	return nil
}
