package main

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/test/testcert"
	th "toolgate.dev/toolgate/test/testharness"
)

// serve reaches a receiver on loopback with --allow-webhook-networks, trusting --webhook-ca-file.
func TestServeDeliversWebhooks(t *testing.T) {
	g := NewWithT(t)
	ca := testcert.NewCA(t, "receivers")
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	g.Expect(os.WriteFile(caFile, ca.PEM, 0o600)).To(Succeed())
	secret := "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	wh, err := standardwebhooks.NewWebhook(secret)
	g.Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	var events []map[string]string
	rc := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg map[string]string
		if wh.Verify(body, r.Header) != nil || json.Unmarshal(body, &msg) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if msg["type"] == "webhook.verification" {
			_ = json.NewEncoder(w).Encode(map[string]string{"challenge": msg["challenge"]})
			return
		}
		mu.Lock()
		events = append(events, msg)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	rc.TLS = &tls.Config{Certificates: []tls.Certificate{ca.ServerCert(t)}}
	rc.StartTLS()
	t.Cleanup(rc.Close)

	bin := th.Binary(t, "./cmd/reference-provider")
	credFile := writeCredential(t)
	tokenFile := filepath.Join(t.TempDir(), "provisioner")
	g.Expect(os.WriteFile(tokenFile, []byte("provisioner-token\n"), 0o600)).To(Succeed())
	base := startServe(t, bin, "--credential-file", credFile, "--provisioner-token-file", tokenFile,
		"--allow-webhook-networks", "10.0.0.0/8,127.0.0.0/8", "--webhook-ca-file", caFile)

	send := func(token, path, key, body string) (int, []byte) {
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(provider.HeaderIdempotencyKey, key)
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		data, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return resp.StatusCode, data
	}
	delivery, err := json.Marshal(map[string]any{"delivery": map[string]string{
		"type": "webhook", "url": rc.URL + "/aap", "registration_id": uuid.NewString(), "signing_secret": secret}})
	g.Expect(err).NotTo(HaveOccurred())
	status, data := send("provisioner-token", "/v1/instances", "hooked", string(delivery))
	g.Expect(status).To(Equal(http.StatusCreated), string(data))
	var provisioned provider.ProvisionInstanceResponse
	g.Expect(json.Unmarshal(data, &provisioned)).To(Succeed())
	g.Expect(provisioned.Instance.Delivery).NotTo(BeNil())

	status, data = send(provisioned.Credential.Token, "/v1/requests", "k1", `{"tool":"t","arguments":{},"timeout":"30m"}`)
	g.Expect(status).To(Equal(http.StatusCreated), string(data))
	var req provider.Request
	g.Expect(json.Unmarshal(data, &req)).To(Succeed())
	g.Expect(run([]string{"decide", "--url", base, "--credential-file", writeAdminCredential(t), "--id", req.ID, "--deny"}, io.Discard)).To(Succeed())
	g.Eventually(func() []map[string]string {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[string]string(nil), events...)
	}).Should(HaveExactElements(HaveKeyWithValue("request_id", req.ID)))
}

func TestServeRefusesBadWebhookFlags(t *testing.T) {
	g := NewWithT(t)
	cred := writeCredential(t)
	err := run([]string{"serve", "--admin-credential-file", writeAdminCredential(t), "--credential-file", cred, "--allow-webhook-networks", "10.0.0.0"}, io.Discard)
	g.Expect(err).To(MatchError(ContainSubstring(`--allow-webhook-networks: "10.0.0.0" is not a CIDR prefix`)))
	err = run([]string{"serve", "--admin-credential-file", writeAdminCredential(t), "--credential-file", cred, "--webhook-ca-file", cred}, io.Discard)
	g.Expect(err).To(MatchError(ContainSubstring("holds no PEM certificate")))
}
