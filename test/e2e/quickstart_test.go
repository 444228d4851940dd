//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The quick start, run as written: every command block of docs/quick-start.md, in order, in one
// shell session, on a cluster where Toolgate is not installed yet (hack/test-e2e.sh runs this test
// alone before it installs Toolgate for the rest of the suite). It installs with the chart, runs the
// reference provider, creates the sample Tool, grants the agent, creates the ToolCall as the agent,
// approves it from the provider's Pod, waits for Succeeded, and removes everything again.
//
// A block runs unless the comment line before it says what the test does instead:
// "quick-start test: skip (why)" or "quick-start test: fails with "text"" (the block must fail, and
// say text). Three things differ from a user's cluster, and only these: the images are the ones
// hack/cluster.sh loaded (IMAGE_PREFIX=localhost/toolgate/, TAG=dev, no pull Secret: step 1 pushes the
// same, or loads them as on kind), the reference provider's volume is one the test made beforehand
// (the local cluster has no StorageClass, kind and cloud clusters provision it), and the
// local cluster has no DNS, so the reference provider's Service name in a command is given its
// address, as a resolver would.
func TestQuickStart(t *testing.T) {
	if os.Getenv("TOOLGATE_E2E_QUICKSTART") == "" {
		t.Skip("runs on a cluster without Toolgate: hack/test-e2e.sh runs it first, with TOOLGATE_E2E_QUICKSTART=1")
	}
	g := NewWithT(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	g.Expect(err).NotTo(HaveOccurred())
	doc, err := os.ReadFile(filepath.Join(root, "docs", "quick-start.md"))
	g.Expect(err).NotTo(HaveOccurred())
	blocks := quickStartBlocks(string(doc))
	g.Expect(len(blocks)).To(BeNumerically(">", 8))

	work := t.TempDir()
	// The page's commands run from the checkout, where it writes the credentials (git ignores them).
	t.Cleanup(func() {
		for _, f := range []string{"provider-credential", "provider-admin-credential"} {
			_ = os.Remove(filepath.Join(root, f))
		}
	})
	state := filepath.Join(work, ".env")
	g.Expect(os.WriteFile(state, []byte(fmt.Sprintf("export IMAGE_PREFIX=localhost/toolgate/ TAG=dev PULL_SECRET= PULL_SECRETS='[]' PATH=%s:%s\n",
		filepath.Join(root, "bin"), os.Getenv("PATH"))), 0o600)).To(Succeed())
	providerVolume(t)
	const providerHost = "toolgate-reference-provider.toolgate-system.svc"
	ran := 0
	for i, b := range blocks {
		if b.skip != "" {
			t.Logf("block %d skipped: %s", i+1, b.skip)
			continue
		}
		script := checkedAnswers(b.text)
		if strings.Contains(script, providerHost) {
			svc := &corev1.Service{}
			g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: systemNamespace, Name: "toolgate-reference-provider"}, svc)).To(Succeed(),
				"block %d names the reference provider's Service before the page created it", i+1)
			script = strings.ReplaceAll(script, providerHost, svc.Spec.ClusterIP)
		}
		out, err := runBlock(t, root, work, state, script)
		ran++
		if b.failsWith != "" {
			g.Expect(err).To(HaveOccurred(), "block %d must fail:\n%s\n%s", i+1, b.text, out)
			g.Expect(out).To(ContainSubstring(b.failsWith), "block %d", i+1)
			continue
		}
		g.Expect(err).NotTo(HaveOccurred(), "block %d failed:\n%s\n--- output:\n%s", i+1, b.text, out)
		if strings.Contains(b.text, "--for=jsonpath='{.status.phase}'=Succeeded") {
			g.Expect(out).To(ContainSubstring("condition met"))
		}
	}
	g.Expect(ran).To(BeNumerically(">", 8))
}

var canI = regexp.MustCompile(`(?m)^(kubectl auth can-i .+?)\s+# (yes|no)$`)

// checkedAnswers turns each `kubectl auth can-i ...  # yes` (or `# no`) line into a check that the
// answer is the one the page claims: can-i exits 1 for no, and the page says which to expect.
func checkedAnswers(script string) string {
	return canI.ReplaceAllString(script, `answer="$$($1 2>/dev/null || true)"; [ "$${answer}" = $2 ] || { echo "$1: $${answer}, the page says $2"; exit 1; }`)
}

type quickStartBlock struct {
	text, skip, failsWith string
}

// The marker lines, of docs/quick-start.md ("quick-start test: ...") and of docs/receipts-cosign.md,
// which TestReceiptsVerifyWithCosign runs the same way ("receipts test: ...").
var (
	skipMarker  = regexp.MustCompile(`^<!-- (?:quick-start|receipts) test: skip \((.+)\) -->$`)
	failsMarker = regexp.MustCompile(`^<!-- (?:quick-start|receipts) test: fails with "(.+)" -->$`)
)

// quickStartBlocks returns the page's sh blocks in order, with what their marker line says.
func quickStartBlocks(doc string) []quickStartBlock {
	var out []quickStartBlock
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sh" {
			continue
		}
		b := quickStartBlock{}
		for j := i - 1; j >= 0; j-- {
			prev := strings.TrimSpace(lines[j])
			if prev == "" {
				continue
			}
			if m := skipMarker.FindStringSubmatch(prev); m != nil {
				b.skip = m[1]
			}
			if m := failsMarker.FindStringSubmatch(prev); m != nil {
				b.failsWith = m[1]
			}
			break
		}
		var text strings.Builder
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			text.WriteString(lines[i] + "\n")
		}
		b.text = text.String()
		out = append(out, b)
	}
	return out
}

// runBlock runs script with bash in the checkout, in the shell state the earlier blocks left in
// state (their exported variables), which it updates; it returns the block's output.
func runBlock(t *testing.T, root, work, state, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	// set -a: the variables a block sets (ID=...) reach the later blocks, as in one terminal.
	wrapped := fmt.Sprintf("set -aeo pipefail\nsource %q\ncd %q\n%s\nexport -p > %q\n", state, root, script, state)
	cmd := exec.CommandContext(ctx, "bash", "-c", wrapped)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+os.Getenv("KUBECONFIG"), "HOME="+os.Getenv("HOME"))
	cmd.Dir = work
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("$ %s%s", script, out.String())
	return out.String(), err
}

// providerVolume makes the volume the quick start's PersistentVolumeClaim for the reference provider
// binds to, as a StorageClass would provision it on kind or a cloud cluster: a directory of the node
// the provider's user may write, bound to that claim only. The test removes it at its end.
func providerVolume(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	dir := filepath.Join(clusterDir, "quick-start-provider-data")
	g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	g.Expect(os.Chown(dir, 65532, 65532)).To(Succeed())
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "quick-start-provider-data"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: systemNamespace, Name: "toolgate-reference-provider-data"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: dir, Type: ptr.To(corev1.HostPathDirectory)}},
		},
	}
	g.Expect(k8s.Create(context.Background(), pv)).To(Succeed())
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), pv)
		_ = os.RemoveAll(dir)
	})
}
