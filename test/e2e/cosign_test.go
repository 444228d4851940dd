//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/receipt"
	"toolgate.dev/toolgate/test/testenv"
)

// cosignModule is the module that pins cosign (its go.mod holds the version).
const cosignModule = "hack/tools/cosign"

var cosignRequire = regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/sigstore/cosign/v2\s+(v\S+)`)

// cosignBinary returns the cosign command line of hack/tools/cosign, built once per machine into
// $TOOLGATE_CACHE/tools/cosign-<version>/cosign (testenv.CacheDir, default ~/.cache/toolgate: outside
// the checkout, where .ci/run's other builds are cached). A later run, or another checkout pinning the
// same version, finds it there and builds nothing.
func cosignBinary(t *testing.T, g Gomega) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	modDir := filepath.Join(root, cosignModule)
	mod, err := os.ReadFile(filepath.Join(modDir, "go.mod"))
	g.Expect(err).NotTo(HaveOccurred())
	m := cosignRequire.FindSubmatch(mod)
	g.Expect(m).NotTo(BeNil(), "%s/go.mod requires no github.com/sigstore/cosign/v2", cosignModule)
	version := string(m[1])

	dir := filepath.Join(testenv.CacheDir(), "tools", "cosign-"+version)
	bin := filepath.Join(dir, "cosign")
	if _, err := os.Stat(bin); err == nil {
		t.Logf("cosign %s: cached in %s", version, bin)
		return bin
	}
	g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	// Built beside its place and renamed into it: a build cut short never looks finished.
	partial := fmt.Sprintf("%s.partial-%d", bin, os.Getpid())
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", partial, "github.com/sigstore/cosign/v2/cmd/cosign")
	cmd.Dir = modDir
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "building cosign in %s:\n%s", cosignModule, out)
	g.Expect(os.Rename(partial, bin)).To(Succeed())
	t.Logf("cosign %s: built in %s into %s", version, time.Since(start).Round(time.Second), bin)
	return bin
}

// cosignCLI runs one cosign binary with a home of its own (cosign keeps its TUF cache in $HOME/.sigstore).
type cosignCLI struct {
	bin, home string
}

// verifyBlobAttestation runs the command docs/receipts-cosign.md gives users:
//
//	cosign verify-blob-attestation --key key.pub --signature envelope.json \
//	  --type https://toolgate.dev/attestation/tool-execution/v1 --insecure-ignore-tlog=true blob
//
// and returns its combined output and error.
func (c cosignCLI) verifyBlobAttestation(key, envelope, blob string) (string, error) {
	cmd := exec.Command(c.bin, "verify-blob-attestation", "--key", key, "--signature", envelope,
		"--type", receipt.PredicateType, "--insecure-ignore-tlog=true", blob)
	cmd.Env = append(os.Environ(), "HOME="+c.home)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// expectVerified checks that cosign accepts the envelope for blob with key.
func (c cosignCLI) expectVerified(g Gomega, key, envelope, blob string) {
	out, err := c.verifyBlobAttestation(key, envelope, blob)
	g.Expect(err).NotTo(HaveOccurred(), "cosign refused %s for %s:\n%s", envelope, blob, out)
	g.Expect(out).To(ContainSubstring("Verified OK"))
}

// expectRefused checks that cosign refuses the envelope for blob with key, saying why (want).
func (c cosignCLI) expectRefused(g Gomega, key, envelope, blob, want string) {
	out, err := c.verifyBlobAttestation(key, envelope, blob)
	g.Expect(err).To(HaveOccurred(), "cosign accepted %s for %s:\n%s", envelope, blob, out)
	g.Expect(out).To(ContainSubstring(want))
	g.Expect(out).NotTo(ContainSubstring("Verified OK"))
}
