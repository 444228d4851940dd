package reference_test

import (
	"crypto/tls"
	"errors"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/provider/reference"
	"toolgate.dev/toolgate/test/testcert"
)

func TestStateSurvivesRestart(t *testing.T) {
	e := start(t)
	dbPath := filepath.Join(t.TempDir(), "restart.db")
	opts := reference.Options{DBPath: dbPath, Credential: credential, Clock: e.clock}
	e.g.Expect(e.srv.Close()).To(Succeed())
	e.open(opts)
	approved := e.create("approved")
	pending := e.create("pending")
	decided, err := e.srv.Decide(approved.ID, provider.StatusApproved, "ok", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(e.srv.Close()).To(Succeed())

	e.open(opts)
	e.g.Expect(e.expectRequest(e.get(approved.ID, ""), http.StatusOK)).To(Equal(decided))
	e.g.Expect(e.expectRequest(e.get(pending.ID, ""), http.StatusOK)).To(Equal(pending))
	r := e.submit("pending", refund())
	e.g.Expect(e.expectRequest(r, http.StatusOK)).To(Equal(pending))
	e.g.Expect(r.header.Get(provider.HeaderIdempotentReplayed)).To(Equal("true"))
	body := refund()
	body.Tool = "other"
	e.expectProblem(e.submit("approved", body), http.StatusUnprocessableEntity, provider.CodeIdempotencyKeyReused)
	e.g.Expect(e.stats().Creates).To(BeZero())

	polled := e.poll(t.Context(), pending.ID, "30s")
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(1))
	e.clock.Step(30 * time.Minute)
	var polledResponse response
	e.g.Eventually(polled).Should(Receive(&polledResponse))
	e.g.Expect(e.expectRequest(polledResponse, http.StatusOK).Status).To(Equal(provider.StatusExpired), "the deadline timer resumes")
}

func TestRequestExpiresWhileServerIsDown(t *testing.T) {
	e := start(t)
	dbPath := filepath.Join(t.TempDir(), "restart.db")
	opts := reference.Options{DBPath: dbPath, Credential: credential, Clock: e.clock}
	e.g.Expect(e.srv.Close()).To(Succeed())
	e.open(opts)
	id := e.create("key-1").ID
	e.g.Expect(e.srv.Close()).To(Succeed())

	e.clock.Step(time.Hour)
	e.open(opts)
	e.g.Expect(e.srv.List(provider.StatusExpired)).To(HaveExactElements(HaveField("ID", id)))
}

func TestTemporaryStoreIsIndependent(t *testing.T) {
	g := NewWithT(t)
	for range 2 {
		s, err := reference.New(reference.Options{Credential: credential})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(s.List("")).To(BeEmpty())
		_, err = s.Decide("missing", provider.StatusApproved, "", nil)
		g.Expect(err).To(MatchError(reference.ErrNotFound))
		g.Expect(s.Close()).To(Succeed())
	}
}

func TestServeTLS(t *testing.T) {
	e := start(t)
	ca := testcert.NewCA(t, "reference provider test CA")
	e.g.Expect(e.srv.Close()).To(Succeed())
	s, err := reference.New(reference.Options{Credential: credential, Clock: e.clock})
	e.g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { e.g.Expect(s.Close()).To(Succeed()) })
	url, err := s.StartTLS("127.0.0.1:0", ca.ServerCert(t))
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(url).To(HavePrefix("https://127.0.0.1:"))
	e.srv, e.url = s, url
	e.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}

	id := e.create("key-1").ID
	e.g.Expect(e.srv.Faults().Set(reference.FaultRule{Op: reference.OpGet, Kind: reference.FaultReset, Count: 1})).To(Succeed())
	_, err = e.try(e.request(http.MethodGet, "/v1/requests/"+id, nil))
	e.g.Expect(errors.Is(err, syscall.ECONNRESET)).To(BeTrue(), "%v", err)
	e.expectRequest(e.get(id, ""), http.StatusOK)
}
