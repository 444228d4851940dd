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
	bolt "go.etcd.io/bbolt"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
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
	e.g.Expect(e.expectRequest(e.submit("pending", refund()), http.StatusOK)).To(Equal(pending))
	body := refund()
	body.Tool = "other"
	e.expectError(e.submit("approved", body), http.StatusConflict, provider.CodeIdempotencyConflict)
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
	s, err := reference.New(reference.Options{Credential: credential, Clock: e.clock, Faults: faults.New(0)})
	e.g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { e.g.Expect(s.Close()).To(Succeed()) })
	url, err := s.StartTLS("127.0.0.1:0", ca.ServerCert(t))
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(url).To(HavePrefix("https://127.0.0.1:"))
	e.srv, e.url = s, url
	e.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}

	id := e.create("key-1").ID
	e.g.Expect(e.srv.Faults().Set(faults.Rule{Op: faults.OpGet, Kind: faults.Reset, Count: 1})).To(Succeed())
	_, err = e.try(e.request(http.MethodGet, "/v1/requests/"+id, nil))
	e.g.Expect(errors.Is(err, syscall.ECONNRESET)).To(BeTrue(), "%v", err)
	e.expectRequest(e.get(id, ""), http.StatusOK)
}

// Instances survive a restart: the credential still works and is bound to its instance, a
// provisioning replay returns the same credential, and a deletion stays a deletion.
func TestInstancesSurviveRestart(t *testing.T) {
	e := start(t)
	dbPath := filepath.Join(t.TempDir(), "restart.db")
	opts := reference.Options{DBPath: dbPath, Credential: credential, ProvisionerToken: provisioner, Clock: e.clock}
	e.g.Expect(e.srv.Close()).To(Succeed())
	e.open(opts)
	kept := e.provision("kept", `{"instance_name":"kept"}`, http.StatusCreated)
	gone := e.provision("gone", `{}`, http.StatusCreated)
	id := e.expectRequest(e.do(e.submitRequestAs(kept.Credential.Token, "k", refund())), http.StatusCreated).ID
	e.g.Expect(e.do(e.requestAs(provisioner, http.MethodDelete, "/v1/instances/"+gone.Instance.ID, nil)).status).To(Equal(http.StatusNoContent))
	e.g.Expect(e.srv.Close()).To(Succeed())

	e.open(opts)
	e.expectRequest(e.do(e.requestAs(kept.Credential.Token, http.MethodGet, "/v1/requests/"+id, nil)), http.StatusOK)
	e.expectError(e.get(id, ""), http.StatusNotFound, provider.CodeNotFound) // the default instance's credential
	e.g.Expect(e.provision("kept", `{"instance_name":"kept"}`, http.StatusOK)).To(Equal(kept))
	e.expectError(e.do(e.submitRequestAs(gone.Credential.Token, "k", refund())), http.StatusUnauthorized, provider.CodeUnauthenticated)
	e.expectError(e.provisionResponse("gone", `{}`), http.StatusConflict, provider.CodeInstanceDeleted)
	e.g.Expect(e.do(e.requestAs(provisioner, http.MethodDelete, "/v1/instances/"+gone.Instance.ID, nil)).status).To(Equal(http.StatusNoContent))
}

// A store written before instances existed (requests with arguments_sha256 and requester, keys in
// idempotency_keys) opens as the default instance's: the requests are served with AAP's fields only
// and their keys replay.
func TestLegacyStoreOpensAsTheDefaultInstance(t *testing.T) {
	g := NewWithT(t)
	dbPath := filepath.Join(t.TempDir(), "legacy.db")
	db, err := bolt.Open(dbPath, 0o600, nil)
	g.Expect(err).NotTo(HaveOccurred())
	const id = "7ab8c8ec-7b2d-4fd6-9b52-752f9515eb71"
	g.Expect(db.Update(func(tx *bolt.Tx) error {
		reqs, err := tx.CreateBucket([]byte("requests"))
		if err != nil {
			return err
		}
		order, err := tx.CreateBucket([]byte("requests_by_order"))
		if err != nil {
			return err
		}
		keys, err := tx.CreateBucket([]byte("idempotency_keys"))
		if err != nil {
			return err
		}
		return errors.Join(
			reqs.Put([]byte(id), []byte(`{"id":"`+id+`","tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":4900,"currency":"GBP"},`+
				`"arguments_sha256":"0000","timeout":"30m","status":"pending","created_at":"2026-09-16T12:00:00Z",`+
				`"deadline_at":"2026-09-16T12:30:00Z","requester":"alice"}`)),
			order.Put([]byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte(id)),
			keys.Put([]byte("toolcall-uid"), []byte(`{"fingerprint":"old","request_id":"`+id+`","created_at":"2026-09-16T12:00:00Z"}`)))
	})).To(Succeed())
	g.Expect(db.Close()).To(Succeed())

	e := start(t, func(o *reference.Options) { o.DBPath = dbPath })
	got := e.expectRequest(e.get(id, ""), http.StatusOK)
	e.g.Expect(got.Status).To(Equal(provider.StatusPending))
	e.g.Expect(e.expectRequest(e.submit("toolcall-uid", refund()), http.StatusOK).ID).To(Equal(id), "its key replays")
	e.g.Expect(e.srv.Keys()).To(Equal(map[string]string{"toolcall-uid": id}))
	e.clock.Step(30 * time.Minute)
	e.g.Eventually(func() string { s, _ := e.srv.Get(id); return s.Status }).Should(Equal(provider.StatusExpired), "its deadline resumed")
}
