package apivalidation_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// podTemplate is the Pod template embedded in the Tool's jobTemplate. Its fields are the Pod's,
// described by `kubectl explain pod.spec`; the Tool CRD leaves their descriptions out
// (hack/manifests.sh, hack/crddesc) to stay small enough for client-side apply.
const podTemplate = "spec.jobTemplate.spec.template"

// kubectl explain reads the descriptions the CRDs serve: every field of every kind has one, the
// Tool's included, but for the fields of the Pod template embedded in its jobTemplate (the template
// itself is described). The root metadata is left out: the apiserver serves ObjectMeta's own schema
// and description for it, as for every kind.
func TestCRDsExplainTheirFields(t *testing.T) {
	for _, name := range []string{
		"tools.toolgate.dev", "toolcalls.toolgate.dev", "approvalproviders.toolgate.dev", "clusterapprovalproviders.toolgate.dev",
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			crd := &apiextensionsv1.CustomResourceDefinition{}
			g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: name}, crd)).To(Succeed())
			for _, v := range crd.Spec.Versions {
				root := v.Schema.OpenAPIV3Schema
				g.Expect(root.Description).NotTo(BeEmpty(), "%s %s: the kind has no description", name, v.Name)
				var described, inTemplate int
				walkProperties(*root, "", func(path string, p apiextensionsv1.JSONSchemaProps) {
					switch {
					case path == "metadata":
					case strings.HasPrefix(path, podTemplate+"."):
						inTemplate++
						g.Expect(p.Description).To(BeEmpty(), "%s %s: %s is described, which makes the CRD too large: hack/crddesc must strip %s",
							name, v.Name, path, podTemplate)
					default:
						described++
						g.Expect(p.Description).NotTo(BeEmpty(), "%s %s: %s has no description for kubectl explain: document the Go field",
							name, v.Name, path)
					}
				})
				g.Expect(described).To(BeNumerically(">", 10), "%s %s: the walk found the fields", name, v.Name)
				if name == "tools.toolgate.dev" {
					g.Expect(inTemplate).To(BeNumerically(">", 100), "the walk reached the Pod template's fields")
				}
			}
		})
	}
}

// walkProperties calls f on every property nested in s, with its dotted path (list items and map
// values add nothing to the path).
func walkProperties(s apiextensionsv1.JSONSchemaProps, path string, f func(string, apiextensionsv1.JSONSchemaProps)) {
	for name, p := range s.Properties {
		sub := strings.TrimPrefix(path+"."+name, ".")
		f(sub, p)
		walkProperties(p, sub, f)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walkProperties(*s.Items.Schema, path, f)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		walkProperties(*s.AdditionalProperties.Schema, path, f)
	}
}

// lastAppliedAnnotation is where client-side `kubectl apply` keeps the whole object it applied, as JSON.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// `kubectl apply -f dist/install.yaml` (client-side) stores each object, as JSON, in its
// last-applied-configuration annotation, and the apiserver refuses an object whose annotations
// together exceed 256 KiB. The Tool CRD, the largest by far, must fit: with the Pod template's
// descriptions it would not (about 340 KB as JSON). The annotation is built as kubectl builds it,
// from the CRD as installed (its spec with the apiserver's defaults, slightly larger than the file),
// and the apiserver itself judges it, in a dry run.
func TestToolCRDFitsClientSideApply(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "tools.toolgate.dev"}, crd)).To(Succeed())

	manifest := &apiextensionsv1.CustomResourceDefinition{Spec: crd.Spec}
	manifest.APIVersion, manifest.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
	manifest.Name, manifest.Annotations = crd.Name, crd.Annotations
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(manifest)
	g.Expect(err).NotTo(HaveOccurred())
	delete(u, "status")
	lastApplied, err := json.Marshal(u)
	g.Expect(err).NotTo(HaveOccurred())

	applied := crd.DeepCopy()
	if applied.Annotations == nil {
		applied.Annotations = map[string]string{}
	}
	applied.Annotations[lastAppliedAnnotation] = string(lastApplied)
	total := 0
	for k, v := range applied.Annotations {
		total += len(k) + len(v)
	}
	limit := apimachineryvalidation.TotalAnnotationSizeLimitB
	t.Logf("Tool CRD as JSON: %d bytes; its annotations after a client-side apply: %d bytes of the %d allowed", len(lastApplied), total, limit)
	g.Expect(total).To(BeNumerically("<=", limit),
		"the Tool CRD no longer fits client-side apply's annotation: strip more descriptions in hack/manifests.sh")
	g.Expect(k8s.Update(ctx, applied, client.DryRunAll)).To(Succeed(), "the apiserver accepts the annotation")

	// The same dry run refuses annotations over the limit: the check above can fail.
	over := crd.DeepCopy()
	over.Annotations = map[string]string{lastAppliedAnnotation: strings.Repeat("x", limit)}
	err = k8s.Update(ctx, over, client.DryRunAll)
	g.Expect(err).To(MatchError(ContainSubstring("metadata.annotations: Too long")))
}

// `kubectl explain tool.spec` reads the apiserver's OpenAPI v3 document of toolgate.dev/v1alpha1,
// built from the CRD: the Tool's fields are described there, the Job's own fields included.
func TestExplainDescribesTheTool(t *testing.T) {
	g := NewWithT(t)
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	for _, path := range [][]string{
		{"spec"},
		{"spec", "toolName"},
		{"spec", "jobTemplate"},
		{"spec", "jobTemplate", "spec", "backoffLimit"},
		{"spec", "jobTemplate", "spec", "template"},
		{"spec", "approval", "rules"},
		{"status", "conditions"},
	} {
		g.Eventually(func(g Gomega) {
			paths, err := dc.OpenAPIV3().Paths()
			g.Expect(err).NotTo(HaveOccurred())
			gv, ok := paths["apis/toolgate.dev/v1alpha1"]
			g.Expect(ok).To(BeTrue(), "the apiserver publishes toolgate.dev/v1alpha1")
			raw, err := gv.Schema("application/json")
			g.Expect(err).NotTo(HaveOccurred())
			var doc struct {
				Components struct {
					Schemas map[string]openAPISchema `json:"schemas"`
				} `json:"components"`
			}
			g.Expect(json.Unmarshal(raw, &doc)).To(Succeed())
			s, ok := doc.Components.Schemas["dev.toolgate.v1alpha1.Tool"]
			g.Expect(ok).To(BeTrue(), "the document has the Tool")
			for _, name := range path {
				s = s.property(name)
			}
			g.Expect(s.Description).NotTo(BeEmpty(), "kubectl explain tool.%s shows no description", strings.Join(path, "."))
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	}
}

// openAPISchema is the part of an OpenAPI v3 schema kubectl explain reads here.
type openAPISchema struct {
	Description string                   `json:"description"`
	Properties  map[string]openAPISchema `json:"properties"`
	Items       *openAPISchema           `json:"items"`
	AllOf       []openAPISchema          `json:"allOf"`
}

// property is the named property of s, looking through list items and single allOf wrappers.
func (s openAPISchema) property(name string) openAPISchema {
	for {
		switch {
		case s.Properties != nil:
			return s.Properties[name]
		case s.Items != nil:
			s = *s.Items
		case len(s.AllOf) == 1:
			s = s.AllOf[0]
		default:
			return openAPISchema{}
		}
	}
}
