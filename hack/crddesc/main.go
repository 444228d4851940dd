// Command crddesc removes the field descriptions beneath one property of a CustomResourceDefinition
// that controller-gen wrote, keeps every other description, and writes the file back as
// controller-gen writes it. hack/manifests.sh runs it on the Tool CRD:
//
//	go run ./hack/crddesc -strip spec.jobTemplate.spec.template config/crd/bases/toolgate.dev_tools.yaml
//
// The Tool's jobTemplate embeds a whole Pod template, whose descriptions would make the CRD about
// 750 KB, too large for `kubectl apply`; without them it stays small, while every field of the Tool
// outside the Pod template keeps the description `kubectl explain` shows. The property named by
// -strip keeps its own description; the properties beneath it lose theirs.
//
// The walk is over the schema's structure (apiextensions' JSONSchemaProps), so a property that
// happens to be called "description" is a field like any other, never mistaken for a description.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	strip := flag.String("strip", "", "dotted path of the property under each version's openAPIV3Schema "+
		"whose nested properties lose their descriptions, e.g. spec.jobTemplate.spec.template")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: crddesc -strip PATH CRD_FILE\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *strip == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *strip); err != nil {
		fmt.Fprintf(os.Stderr, "crddesc: %v\n", err)
		os.Exit(1)
	}
}

func run(file, path string) error {
	in, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	out, err := stripDescriptions(in, path)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return os.WriteFile(file, out, 0o644)
}

// stripDescriptions decodes one CRD document written by controller-gen, removes the descriptions
// beneath path in every version's schema, and encodes it again in controller-gen's format.
func stripDescriptions(in []byte, path string) ([]byte, error) {
	doc := bytes.TrimPrefix(in, []byte("---\n"))
	if bytes.Contains(doc, []byte("\n---\n")) {
		return nil, fmt.Errorf("holds more than one YAML document; crddesc reads one CRD per file, as controller-gen writes them")
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
		return nil, fmt.Errorf("not a CustomResourceDefinition: %w", err)
	}
	if crd.Kind != "CustomResourceDefinition" {
		return nil, fmt.Errorf("not a CustomResourceDefinition: kind %q", crd.Kind)
	}
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return nil, fmt.Errorf("version %s of %s has no openAPIV3Schema", v.Name, crd.Name)
		}
		if err := stripBeneath(v.Schema.OpenAPIV3Schema, strings.Split(path, "."), ""); err != nil {
			return nil, fmt.Errorf("version %s of %s: %w", v.Name, crd.Name, err)
		}
	}
	return marshal(&crd)
}

// stripBeneath follows path, property names from s, and removes every description beneath the
// property it ends at (that property's own stays). walked is the part of the path already followed.
func stripBeneath(s *apiextensionsv1.JSONSchemaProps, path []string, walked string) error {
	if len(path) == 0 {
		eachChild(s, clearDescriptions)
		return nil
	}
	walked = strings.TrimPrefix(walked+"."+path[0], ".")
	child, ok := s.Properties[path[0]]
	if !ok {
		return fmt.Errorf("the schema has no property %s: -strip names a path of properties under openAPIV3Schema, such as spec.jobTemplate.spec.template", walked)
	}
	if err := stripBeneath(&child, path[1:], walked); err != nil {
		return err
	}
	s.Properties[path[0]] = child
	return nil
}

// clearDescriptions removes the description of s and of every schema nested in it.
func clearDescriptions(s *apiextensionsv1.JSONSchemaProps) {
	s.Description = ""
	eachChild(s, clearDescriptions)
}

// eachChild calls f on every schema directly nested in s: its properties, items, additional and
// pattern properties, definitions, dependencies and the schemas of allOf, anyOf, oneOf and not.
// Schemas held by value in maps are written back after f.
func eachChild(s *apiextensionsv1.JSONSchemaProps, f func(*apiextensionsv1.JSONSchemaProps)) {
	for _, m := range []map[string]apiextensionsv1.JSONSchemaProps{s.Properties, s.PatternProperties, s.Definitions} {
		for name, child := range m {
			f(&child)
			m[name] = child
		}
	}
	for name, dep := range s.Dependencies {
		if dep.Schema != nil {
			f(dep.Schema)
			s.Dependencies[name] = dep
		}
	}
	for _, list := range [][]apiextensionsv1.JSONSchemaProps{s.AllOf, s.AnyOf, s.OneOf} {
		for i := range list {
			f(&list[i])
		}
	}
	if s.Not != nil {
		f(s.Not)
	}
	if s.Items != nil {
		if s.Items.Schema != nil {
			f(s.Items.Schema)
		}
		for i := range s.Items.JSONSchemas {
			f(&s.Items.JSONSchemas[i])
		}
	}
	for _, b := range []*apiextensionsv1.JSONSchemaPropsOrBool{s.AdditionalProperties, s.AdditionalItems} {
		if b != nil && b.Schema != nil {
			f(b.Schema)
		}
	}
}

// marshal encodes the CRD as controller-gen does (genall.WriteYAML with the crd generator's
// transforms): JSON first, the status and metadata.creationTimestamp left out, then YAML by
// sigs.k8s.io/yaml from the decoded map, so the keys come out sorted and numbers exact.
func marshal(crd *apiextensionsv1.CustomResourceDefinition) ([]byte, error) {
	j, err := json.Marshal(crd)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	delete(obj, "status")
	if meta, ok := obj["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return append([]byte("---\n"), out...), nil
}
