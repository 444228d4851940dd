package argohealth_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	"toolgate.dev/toolgate/test/argohealth"
	"toolgate.dev/toolgate/test/testenv"
)

// healthTests is a health_test.yaml, as Argo CD's resource_customizations hold them.
type healthTests struct {
	Tests []struct {
		HealthStatus argohealth.Status `json:"healthStatus"`
		InputPath    string            `json:"inputPath"`
	} `json:"tests"`
}

func root(t *testing.T) string {
	t.Helper()
	r, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// readTests reads the health_test.yaml of kind.
func readTests(t *testing.T, kind string) healthTests {
	t.Helper()
	g := NewWithT(t)
	b, err := os.ReadFile(filepath.Join(root(t), argohealth.Dir(kind), "health_test.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var ht healthTests
	g.Expect(yaml.UnmarshalStrict(b, &ht)).To(Succeed(), "%s/health_test.yaml", kind)
	g.Expect(ht.Tests).NotTo(BeEmpty(), "%s/health_test.yaml has no test", kind)
	return ht
}

// readObject reads a test case's input as Argo CD's test does: YAML into decoded JSON.
func readObject(t *testing.T, kind, path string) map[string]any {
	t.Helper()
	g := NewWithT(t)
	b, err := os.ReadFile(filepath.Join(root(t), argohealth.Dir(kind), path))
	g.Expect(err).NotTo(HaveOccurred())
	obj := map[string]any{}
	g.Expect(yaml.Unmarshal(b, &obj)).To(Succeed(), path)
	g.Expect(obj).To(HaveKeyWithValue("kind", kind), "%s/%s is not a %s", kind, path, kind)
	return obj
}

// config/argocd/resource_customizations/toolgate.dev has a health check for each kind Toolgate
// serves, and no other; each has a health_test.yaml, and each file of its testdata is a test case.
func TestEveryKindHasAHealthCheckAndItsTests(t *testing.T) {
	g := NewWithT(t)
	dir := filepath.Join(root(t), filepath.Dir(argohealth.Dir("x")))
	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	var kinds []string
	for _, e := range entries {
		kinds = append(kinds, e.Name())
	}
	g.Expect(kinds).To(ConsistOf(argohealth.Kinds))
	for _, kind := range argohealth.Kinds {
		script, err := argohealth.Script(kind)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(script).To(ContainSubstring("return hs"))
		used := map[string]bool{}
		for _, tc := range readTests(t, kind).Tests {
			used[filepath.Clean(tc.InputPath)] = true
		}
		files, err := filepath.Glob(filepath.Join(dir, kind, "testdata", "*.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(files).NotTo(BeEmpty())
		for _, f := range files {
			g.Expect(used).To(HaveKey(filepath.Join("testdata", filepath.Base(f))), "%s is no test case of %s/health_test.yaml", f, kind)
		}
	}
}

// Each health check gives each of its test cases the status and message its health_test.yaml
// expects, run as Argo CD runs it.
func TestHealthChecksPassTheirTests(t *testing.T) {
	for _, kind := range argohealth.Kinds {
		script, err := argohealth.Script(kind)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		for _, tc := range readTests(t, kind).Tests {
			t.Run(kind+"/"+tc.InputPath, func(t *testing.T) {
				g := NewWithT(t)
				got, err := argohealth.Run(script, readObject(t, kind, tc.InputPath))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal(tc.HealthStatus))
			})
		}
	}
}

// Argo CD and Flux agree: over every test case, kstatus (what Flux's wait, kapply and Config Sync
// use) computes the status that matches the health Argo CD's check gives.
func TestHealthAgreesWithKstatus(t *testing.T) {
	kstatusOf := map[string]kstatus.Status{
		"Healthy": kstatus.CurrentStatus, "Progressing": kstatus.InProgressStatus, "Degraded": kstatus.FailedStatus,
	}
	for _, kind := range argohealth.Kinds {
		for _, tc := range readTests(t, kind).Tests {
			t.Run(kind+"/"+tc.InputPath, func(t *testing.T) {
				g := NewWithT(t)
				// As a client reads it from the apiserver: integers as int64.
				b, err := yaml.Marshal(readObject(t, kind, tc.InputPath))
				g.Expect(err).NotTo(HaveOccurred())
				b, err = yaml.YAMLToJSON(b)
				g.Expect(err).NotTo(HaveOccurred())
				u := &unstructured.Unstructured{}
				g.Expect(u.UnmarshalJSON(b)).To(Succeed())
				res, err := kstatus.Compute(u)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(kstatusOf).To(HaveKey(tc.HealthStatus.Status))
				g.Expect(res.Status).To(Equal(kstatusOf[tc.HealthStatus.Status]), res.Message)
			})
		}
	}
}

// A script that returns no table, or a status Argo CD does not know, is told apart as Argo CD tells
// it apart: an error, and Unknown.
func TestRunReadsTheResultAsArgoCDDoes(t *testing.T) {
	g := NewWithT(t)
	_, err := argohealth.Run(`return "Healthy"`, map[string]any{})
	g.Expect(err).To(MatchError(ContainSubstring("expect table output")))
	got, err := argohealth.Run(`return {status = "Fine"}`, map[string]any{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status).To(Equal("Unknown"))
	_, err = argohealth.Run(`return {status = string.lower("Healthy")}`, map[string]any{})
	g.Expect(err).To(HaveOccurred(), "Argo CD does not open the string library for health checks")
	got, err = argohealth.Run(`return {status = "Healthy", message = obj.metadata.name .. " " .. obj.metadata.generation}`,
		map[string]any{"metadata": map[string]any{"name": "refund", "generation": float64(2)}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(argohealth.Status{Status: "Healthy", Message: "refund 2"}))
}
