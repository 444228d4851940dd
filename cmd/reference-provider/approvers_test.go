package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	th "toolgate.dev/toolgate/test/testharness"
)

// decide records who decided in the note: the approver whose credential it used, from
// serve --approvers-file, or "admin" for the admin credential. list works with an approver's
// credential; a credential nobody holds is refused.
func TestDecideRecordsTheApprover(t *testing.T) {
	g := NewWithT(t)
	bin := th.Binary(t, "./cmd/reference-provider")
	dir := t.TempDir()
	credFile, adminFile := writeCredential(t), writeAdminCredential(t)
	approvers := filepath.Join(dir, "approvers")
	g.Expect(os.WriteFile(approvers, []byte("# name credential\nalice alice-credential\n\nbob bob-credential\n"), 0o600)).To(Succeed())
	aliceFile, strangerFile := filepath.Join(dir, "alice"), filepath.Join(dir, "stranger")
	g.Expect(os.WriteFile(aliceFile, []byte("alice-credential\n"), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(strangerFile, []byte("nobody-has-this\n"), 0o600)).To(Succeed())

	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(dir, "provider.db"),
		"--admin-credential-file", adminFile, "--credential-file", credFile, "--approvers-file", approvers)
	stdout, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	base := servedURL(t, stdout)

	c, err := provider.NewHTTPClient(provider.Options{BaseURL: base, CredentialFile: credFile, RequestTimeout: 5 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	submit := func(key string) string {
		req, err := c.Submit(context.Background(), provider.Submission{IdempotencyKey: key, Tool: "issue_refund",
			Arguments: json.RawMessage(`{"amount":4900}`), Timeout: 30 * time.Minute})
		g.Expect(err).NotTo(HaveOccurred())
		return req.ID
	}
	decide := func(cred, id string, flags ...string) (provider.Request, error) {
		var out bytes.Buffer
		err := run(append([]string{"decide", "--url", base, "--credential-file", cred, "--id", id}, flags...), &out)
		var req provider.Request
		if err == nil {
			g.Expect(json.Unmarshal(out.Bytes(), &req)).To(Succeed(), out.String())
		}
		return req, err
	}

	byAlice, err := decide(aliceFile, submit("k1"), "--approve", "--note", "Duplicate charge confirmed.")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(byAlice.Decision.Note).To(Equal("Duplicate charge confirmed. (approved by alice)"))

	byAdmin, err := decide(adminFile, submit("k2"), "--deny", "--note", "Not a duplicate.")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(byAdmin.Decision.Note).To(Equal("Not a duplicate. (denied by admin)"), "the admin credential records admin")

	_, err = decide(strangerFile, submit("k3"), "--approve")
	g.Expect(err).To(MatchError(ContainSubstring("unauthenticated")))

	var out bytes.Buffer
	g.Expect(run([]string{"list", "--url", base, "--credential-file", aliceFile, "--status", "pending"}, &out)).To(Succeed())
	g.Expect(out.String()).To(ContainSubstring("issue_refund"), "k3 is still pending")
}

func TestServeRefusesABadApproversFile(t *testing.T) {
	for name, c := range map[string]struct {
		content string
		want    func(path string) string // the error serve returns
	}{
		"one field": {"alice\n", func(path string) string {
			return path + ` line 1: want "NAME CREDENTIAL" or "NAME CREDENTIAL instances=ID,ID...", got 1 fields`
		}},
		"duplicate": {"alice a1\nalice a2\n", func(path string) string {
			return path + " line 2: approver alice is listed twice"
		}},
		"a space in the name": {"al ice a1\n", func(path string) string {
			return path + ` line 1: want "NAME CREDENTIAL" or "NAME CREDENTIAL instances=ID,ID...", got 3 fields`
		}},
		"a scope by name": {"alice a1 instances=payments\n", func(string) string {
			return `reference provider: approver alice's scope names "payments", which is not an instance id: ` +
				`a scope names instances by the id the provider issued (a UUID), never by name, which the provisioner chooses`
		}},
		"bad name": {"al/ice a1\n", func(string) string {
			return `reference provider: approver name "al/ice": use 1 to 64 letters, digits and . _ @ + - (starting with a letter or digit)`
		}},
		"admin name": {"admin a1\n", func(string) string {
			return `reference provider: approver name "admin" is the name decisions made with the admin credential record: choose another`
		}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			path := filepath.Join(t.TempDir(), "approvers")
			g.Expect(os.WriteFile(path, []byte(c.content), 0o600)).To(Succeed())
			err := run([]string{"serve", "--admin-credential-file", writeAdminCredential(t), "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "p.db"),
				"--credential-file", writeCredential(t), "--approvers-file", path}, &bytes.Buffer{})
			g.Expect(err).To(MatchError(c.want(path)))
		})
	}
}

// An approver line may end with the instances the approver is limited to, by id; "instances=" alone
// scopes them to none until the admin grants one.
func TestApproversFileScopesApproversToInstances(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "approvers")
	const payments, support = "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f", "0a1b2c3d-4e5f-4a6b-8c7d-8e9f0a1b2c3d"
	g.Expect(os.WriteFile(path, []byte("# who\nalice a1 instances="+payments+","+support+"\nbob b1\ncarol c1 instances=\n"), 0o600)).To(Succeed())
	approvers, scopes, err := readApprovers(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(approvers).To(Equal(map[string]string{"alice": "a1", "bob": "b1", "carol": "c1"}))
	g.Expect(scopes).To(Equal(map[string][]string{"alice": {payments, support}, "carol": {}}), "bob sees every instance, carol none until granted")
}

// serve --quorum 2: the first approver's decide leaves the request pending, the second's approves it.
func TestServeQuorum(t *testing.T) {
	g := NewWithT(t)
	bin := th.Binary(t, "./cmd/reference-provider")
	dir := t.TempDir()
	credFile, adminFile := writeCredential(t), writeAdminCredential(t)
	approvers := filepath.Join(dir, "approvers")
	g.Expect(os.WriteFile(approvers, []byte("alice alice-credential\nbob bob-credential\n"), 0o600)).To(Succeed())
	aliceFile, bobFile := filepath.Join(dir, "alice"), filepath.Join(dir, "bob")
	g.Expect(os.WriteFile(aliceFile, []byte("alice-credential\n"), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(bobFile, []byte("bob-credential\n"), 0o600)).To(Succeed())

	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(dir, "provider.db"), "--quorum", "2",
		"--admin-credential-file", adminFile, "--credential-file", credFile, "--approvers-file", approvers)
	stdout, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	base := servedURL(t, stdout)
	c, err := provider.NewHTTPClient(provider.Options{BaseURL: base, CredentialFile: credFile, RequestTimeout: 5 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	req, err := c.Submit(context.Background(), provider.Submission{IdempotencyKey: "k", Tool: "issue_refund",
		Arguments: json.RawMessage(`{"amount":4900}`), Timeout: 30 * time.Minute})
	g.Expect(err).NotTo(HaveOccurred())

	for _, step := range []struct{ file, status string }{{aliceFile, provider.StatusPending}, {bobFile, provider.StatusApproved}} {
		var out bytes.Buffer
		g.Expect(run([]string{"decide", "--url", base, "--credential-file", step.file, "--id", req.ID, "--approve"}, &out)).To(Succeed())
		var got struct {
			Status string `json:"status"`
		}
		g.Expect(json.Unmarshal(out.Bytes(), &got)).To(Succeed(), out.String())
		g.Expect(got.Status).To(Equal(step.status), out.String())
	}
}

func TestServeRefusesABadQuorum(t *testing.T) {
	for _, n := range []string{"0", "-1", "33"} {
		err := run([]string{"serve", "--admin-credential-file", writeAdminCredential(t), "--credential-file", writeCredential(t), "--quorum", n}, io.Discard)
		NewWithT(t).Expect(err).To(MatchError("--quorum " + n + ": give the number of distinct approvers a request needs, from 1 to 32"))
	}
}
