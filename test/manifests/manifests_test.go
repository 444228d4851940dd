/*
Copyright 2026 The Toolgate Authors.

Licensed under the Apache License, Version 2.0.
*/

// Package manifests_test checks that the committed generated manifests (the CRDs in
// config/crd/bases and the manager ClusterRole in config/rbac/role.yaml) match what controller-gen
// produces from the current source. A failure means `make manifests` was not run after a change to
// an API type or an RBAC marker.
package manifests_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/onsi/gomega"
)

const fix = "run `make manifests` and commit the result"

func TestGeneratedManifestsAreUpToDate(t *testing.T) {
	g := gomega.NewWithT(t)

	root := repoRoot(t)
	controllerGen := controllerGenBinary(t, root)

	out := t.TempDir()
	crdOut := filepath.Join(out, "crd")
	rbacOut := filepath.Join(out, "rbac")
	// The Makefile's manifests target (hack/manifests.sh), written to a scratch directory.
	g.Expect(os.MkdirAll(crdOut, 0o755)).To(gomega.Succeed())
	cmd := exec.CommandContext(t.Context(), "bash", "hack/manifests.sh", controllerGen, crdOut, rbacOut)
	cmd.Dir = root
	combined, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(gomega.HaveOccurred(), "%s failed:\n%s", strings.Join(cmd.Args, " "), combined)

	t.Run("crds", func(t *testing.T) {
		g := gomega.NewWithT(t)
		generated := yamlFiles(t, crdOut)
		committed := yamlFiles(t, filepath.Join(root, "config", "crd", "bases"))
		g.Expect(generated).NotTo(gomega.BeEmpty(), "controller-gen generated no CRDs")
		g.Expect(committed).To(gomega.Equal(generated),
			"the CRD files in config/crd/bases differ from the generated set: %s", fix)
		for _, name := range generated {
			compareFile(t, filepath.Join(crdOut, name), filepath.Join(root, "config", "crd", "bases", name),
				"config/crd/bases/"+name)
		}
	})

	t.Run("rbac", func(t *testing.T) {
		g := gomega.NewWithT(t)
		generated := filepath.Join(rbacOut, "role.yaml")
		_, err := os.Stat(generated)
		g.Expect(err).NotTo(gomega.HaveOccurred(),
			"controller-gen generated no config/rbac/role.yaml: the controllers carry no +kubebuilder:rbac markers")
		compareFile(t, generated, filepath.Join(root, "config", "rbac", "role.yaml"), "config/rbac/role.yaml")
	})
}

// compareFile fails unless the committed file is byte-for-byte the generated one.
func compareFile(t *testing.T, generatedPath, committedPath, display string) {
	t.Helper()
	g := gomega.NewWithT(t)
	generated, err := os.ReadFile(generatedPath)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	committed, err := os.ReadFile(committedPath)
	g.Expect(err).NotTo(gomega.HaveOccurred(), "%s is missing: %s", display, fix)
	if bytes.Equal(committed, generated) {
		return
	}
	g.Expect(string(committed)).To(gomega.Equal(string(generated)), "%s is stale (%s): %s",
		display, firstDifference(committed, generated), fix)
}

// firstDifference describes the first line on which the committed and generated files differ.
func firstDifference(committed, generated []byte) string {
	c := strings.Split(string(committed), "\n")
	gen := strings.Split(string(generated), "\n")
	for i := 0; i < len(c) || i < len(gen); i++ {
		switch {
		case i >= len(c):
			return fmt.Sprintf("line %d: committed file ends, generated has %q", i+1, gen[i])
		case i >= len(gen):
			return fmt.Sprintf("line %d: committed has %q, generated file ends", i+1, c[i])
		case c[i] != gen[i]:
			return fmt.Sprintf("line %d: committed %q, generated %q", i+1, c[i], gen[i])
		}
	}
	return "no line differs"
}

// yamlFiles lists the names of the .yaml files directly in dir, sorted.
func yamlFiles(t *testing.T, dir string) []string {
	t.Helper()
	g := gomega.NewWithT(t)
	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// repoRoot walks up from the test's working directory to the directory holding go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	g := gomega.NewWithT(t)
	dir, err := os.Getwd()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		g.Expect(parent).NotTo(gomega.Equal(dir), "no go.mod above the test's working directory")
		dir = parent
	}
}

// controllerGenBinary returns the controller-gen to run: $CONTROLLER_GEN (relative paths are taken
// from the repository root), else bin/controller-gen. When that file does not exist, controller-gen
// is built from hack/tools (the version the Makefile pins) into a temporary directory.
func controllerGenBinary(t *testing.T, root string) string {
	t.Helper()
	g := gomega.NewWithT(t)
	path := os.Getenv("CONTROLLER_GEN")
	if path == "" {
		path = filepath.Join(root, "bin", "controller-gen")
	} else if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	_, err := os.Stat(path)
	if err == nil {
		return path
	}
	g.Expect(errors.Is(err, os.ErrNotExist)).To(gomega.BeTrue(), "stat %s: %v", path, err)

	built := filepath.Join(t.TempDir(), "controller-gen")
	t.Logf("%s not found; building controller-gen from hack/tools", path)
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", built, "sigs.k8s.io/controller-tools/cmd/controller-gen")
	cmd.Dir = filepath.Join(root, "hack", "tools")
	combined, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(gomega.HaveOccurred(), "building controller-gen failed:\n%s", combined)
	return built
}
