package installer

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"toolgate.dev/toolgate/test/argohealth"
)

// config/argocd is a kustomize Component that adds Toolgate's Argo CD health checks to the argocd-cm
// of an Argo CD installed with kustomize (its manifests carry no namespace; the kustomization sets
// it): each key holds its kind's health.lua as it is, and the ConfigMap's other settings stay.
func TestArgoCDComponentAddsTheHealthChecksToArgocdCM(t *testing.T) {
	g := gomega.NewWithT(t)
	root := repoRoot(t)
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, filepath.Join(root, "config", "argocd"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	argocdCM := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  labels:\n    app.kubernetes.io/part-of: argocd\n" +
		"data:\n  url: https://argocd.example.com\n"
	g.Expect(os.WriteFile(filepath.Join(overlay, "argocd-cm.yaml"), []byte(argocdCM), 0o600)).To(gomega.Succeed())
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: argocd\n"+
		"resources:\n- argocd-cm.yaml\ncomponents:\n- %s\n", rel)
	g.Expect(os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600)).To(gomega.Succeed())

	built := kustomize(t, overlay)

	var cm corev1.ConfigMap
	g.Expect(yaml.UnmarshalStrict(built, &cm)).To(gomega.Succeed(), "one ConfigMap: %s", built)
	g.Expect(cm.Name).To(gomega.Equal("argocd-cm"), "the name Argo CD reads, without a hash suffix")
	g.Expect(cm.Namespace).To(gomega.Equal("argocd"))
	g.Expect(cm.Labels).To(gomega.HaveKeyWithValue("app.kubernetes.io/part-of", "argocd"))
	want := map[string]string{"url": "https://argocd.example.com"}
	for _, kind := range argohealth.Kinds {
		script, err := argohealth.Script(kind)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		want["resource.customizations.health.toolgate.dev_"+kind] = script
	}
	g.Expect(cm.Data).To(gomega.Equal(want))
}
