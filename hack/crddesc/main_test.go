package main

import (
	"os"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

const crd = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names:
    kind: Widget
    plural: widgets
  scope: Namespaced
  versions:
  - name: v1
    schema:
      openAPIV3Schema:
        description: A widget.
        properties:
          spec:
            description: The spec.
            properties:
              template:
                description: The template.
                properties:
                  description:
                    description: A field called description.
                    type: string
                  items:
                    description: A list.
                    items:
                      description: An item.
                      properties:
                        size:
                          description: Its size.
                          type: integer
                      type: object
                    type: array
                  labels:
                    additionalProperties:
                      description: A value.
                      type: string
                    description: A map.
                    type: object
                type: object
              name:
                description: The name.
                type: string
            type: object
        type: object
    served: true
    storage: true
`

func TestStripDescriptions(t *testing.T) {
	out, err := stripDescriptions([]byte(crd), "spec.template")
	if err != nil {
		t.Fatal(err)
	}
	var got apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(out, &got); err != nil {
		t.Fatal(err)
	}
	root := got.Spec.Versions[0].Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	tmpl := spec.Properties["template"]
	items := tmpl.Properties["items"]
	labels := tmpl.Properties["labels"]
	field, ok := tmpl.Properties["description"]
	if !ok {
		t.Fatal("the property called description was removed: it is a field, not a description")
	}
	for _, c := range []struct {
		where, got, want string
	}{
		{"the root", root.Description, "A widget."},
		{"spec", spec.Description, "The spec."},
		{"spec.name, beside the path", spec.Properties["name"].Description, "The name."},
		{"spec.template, the named property itself", tmpl.Description, "The template."},
		{"spec.template.description (a field)", field.Description, ""},
		{"spec.template.items", items.Description, ""},
		{"spec.template.items[]", items.Items.Schema.Description, ""},
		{"spec.template.items[].size", items.Items.Schema.Properties["size"].Description, ""},
		{"spec.template.labels", labels.Description, ""},
		{"spec.template.labels{}", labels.AdditionalProperties.Schema.Description, ""},
	} {
		if c.got != c.want {
			t.Errorf("%s: description %q, want %q", c.where, c.got, c.want)
		}
	}
	if field.Type != "string" || items.Items.Schema.Properties["size"].Type != "integer" {
		t.Errorf("types changed: %s", out)
	}
}

// Written back with nothing to strip, a CRD controller-gen wrote is byte for byte the same: the
// encoding is controller-gen's, so `make manifests` output stays as controller-gen would write it.
func TestEncodingIsControllerGens(t *testing.T) {
	for _, name := range []string{"toolgate.dev_toolcalls.yaml", "toolgate.dev_approvalproviders.yaml"} {
		in, err := os.ReadFile("../../config/crd/bases/" + name)
		if err != nil {
			t.Fatal(err)
		}
		out, err := stripDescriptions(in, "kind")
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != string(in) {
			t.Errorf("%s changed when written back unchanged", name)
		}
	}
}

func TestBadInputIsRefused(t *testing.T) {
	for _, c := range []struct {
		name, in, path, want string
	}{
		{"missing property", crd, "spec.tempalte", "the schema has no property spec.tempalte"},
		{"missing nested property", crd, "spec.template.nope", "the schema has no property spec.template.nope"},
		{"two documents", crd + crd, "spec", "more than one YAML document"},
		{"not a CRD", "---\napiVersion: v1\nkind: ConfigMap\ndata:\n  a: b\n", "spec", "not a CustomResourceDefinition"},
		{"another kind", "---\napiVersion: v1\nkind: ConfigMap\n", "spec", `not a CustomResourceDefinition: kind "ConfigMap"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := stripDescriptions([]byte(c.in), c.path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
