package reference

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"toolgate.dev/toolgate/internal/provider"
)

// Instances. Every request belongs to the instance whose credential created it, and only that
// instance reads or cancels it (another instance gets 404, as for a request that does not exist).
// The static credential (Options.Credential) is bound to the built-in default instance, which the
// provisioner cannot see, change or delete: it belongs to whoever configured the provider. The
// provisioner (Options.ProvisionerToken) creates the other instances, each with its own credential,
// and manages them; deleting one revokes its credential, cancels its pending requests (expiring
// those whose deadline has passed) and keeps its terminal outcomes. The store keeps a provisioned
// instance's credential in the result of its provisioning, so that a replay returns it again, until
// the instance is deleted or Options.Retention after its provisioning (the seven days AAP asks by
// default), whichever comes first: then the record goes, credential and all, so that the key, which
// anyone who can read the provisioner's objects may know, no longer hands the credential out. Reusing
// the key after that provisions a new instance, as AAP allows once a key is discarded.

// DefaultInstanceName is the name of the instance the static credential is bound to.
const DefaultInstanceName = "default"

// defaultInstanceID is the id of the built-in default instance: the same for every reference provider.
var defaultInstanceID = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://toolgate.dev/reference-provider/default-instance")).String()

var (
	errInstanceNotFound = errors.New("instance not found")
	errInstanceDeleted  = errors.New("instance deleted")
)

// maxInstanceName bounds an instance's name, in characters.
const maxInstanceName = 128

// DefaultInstance returns the instance the static credential is bound to.
func (s *Server) DefaultInstance() provider.Instance { return s.defaultInstance.wire() }

// loadInstances reads the provisioned instances and their credentials from the store.
func (s *Server) loadInstances() error {
	all, err := s.store.instances()
	if err != nil {
		return err
	}
	for _, ir := range all {
		s.instances[ir.ID] = ir
	}
	creds, err := s.store.credentials()
	if err != nil {
		return err
	}
	for sum, id := range creds {
		h, err := credentialHash(sum)
		if err != nil {
			return err
		}
		s.creds[h] = issued{instance: id, expiresAt: s.instances[id].CredentialExpiresAt}
	}
	return nil
}

// issued is what a live instance credential authenticates as: its instance, until it expires.
type issued struct {
	instance  string
	expiresAt *time.Time
}

func credentialHash(hexSum string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	b, err := hex.DecodeString(hexSum)
	if err != nil || len(b) != sha256.Size {
		return h, fmt.Errorf("stored credential hash %q is not a SHA-256", hexSum)
	}
	copy(h[:], b)
	return h, nil
}

// liveLocked reports whether requests may be created for an instance.
func (s *Server) liveLocked(id string) bool {
	if id == s.defaultInstance.ID {
		return true
	}
	ir, ok := s.instances[id]
	return ok && !ir.deleted()
}

// instanceLocked returns an instance by id; a deleted one counts too.
func (s *Server) instanceLocked(id string) (instanceRecord, bool) {
	if id == s.defaultInstance.ID {
		return s.defaultInstance, true
	}
	ir, ok := s.instances[id]
	return ir, ok
}

// refusal is an operation refused with a given answer (a receiver that failed its checks).
type refusal struct{ rp reply }

func (r *refusal) Error() string { return "refused" }

// provision creates an instance and its credential, or returns the result of the provisioning its
// Idempotency-Key already made (replayed): the same instance and credential. With a receiver
// (delivery), the receiver is checked and verified first, with the instance's id to be; nothing is
// committed unless it passes (a *refusal says why not). A replay verifies nothing again.
func (s *Server) provision(ctx context.Context, key, name, fp string, delivery *deliveryConfig, delay func() error) (
	res provider.ProvisionInstanceResponse, replayed bool, err error) {
	lock := "provision\x00" + key
	if !s.acquire(ctx, lock) {
		return res, false, errAborted
	}
	defer s.release(lock)
	if err := delay(); err != nil {
		return res, false, err
	}
	if res, replayed, err := s.provisionReplay(key, fp); replayed || err != nil {
		return res, replayed, err
	}
	id := uuid.NewString()
	if delivery != nil {
		if rp, ok := s.admitDelivery(ctx, id, delivery); !ok {
			return res, false, &refusal{rp}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return res, false, errAborted
	}
	now := s.now()
	token := newSecretToken("rpi_")
	sum := sha256.Sum256([]byte(token))
	ir := instanceRecord{ID: id, Name: name, CreatedAt: now, Credential: hex.EncodeToString(sum[:]), ProvisionKey: key, Delivery: delivery}
	if ir.Name == "" {
		ir.Name = "instance-" + ir.ID[:8]
	}
	if s.opts.CredentialLifetime > 0 {
		exp := now.Add(s.opts.CredentialLifetime)
		ir.CredentialExpiresAt = &exp
	}
	res = provider.ProvisionInstanceResponse{Instance: ir.wire(), Credential: provider.IssuedCredential{Token: token, ExpiresAt: ir.CredentialExpiresAt}}
	if err := s.store.createInstance(ir, provisionRecord{Fingerprint: fp, InstanceID: ir.ID, CreatedAt: now, Result: &res}); err != nil {
		return provider.ProvisionInstanceResponse{}, false, err
	}
	s.instances[ir.ID] = ir
	s.credMu.Lock()
	s.creds[sum] = issued{instance: ir.ID, expiresAt: ir.CredentialExpiresAt}
	s.credMu.Unlock()
	s.log.Info("instance provisioned", "instance", ir.ID, "name", ir.Name, "webhook", delivery != nil)
	return res, false, nil
}

// provisionReplay returns the result of the provisioning a key already made (replayed), or an error
// if the key cannot be used; neither if the key is free.
func (s *Server) provisionReplay(key, fp string) (res provider.ProvisionInstanceResponse, replayed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr, found, err := s.store.provision(key)
	switch {
	case err != nil:
		return res, false, err
	case found && pr.Fingerprint != fp:
		return res, false, errKeyConflict
	case found && pr.Result == nil:
		return res, false, errInstanceDeleted
	case found:
		return *pr.Result, true, nil
	}
	return res, false, nil
}

// newSecretToken draws a bearer token: prefix and 32 random bytes.
func newSecretToken(prefix string) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// getInstance returns a provisioned instance; a deleted one, or the default instance, is not found.
func (s *Server) getInstance(id string) (provider.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ir, ok := s.instances[id]
	if !ok || ir.deleted() {
		return provider.Instance{}, errInstanceNotFound
	}
	return ir.wire(), nil
}

// instanceUpdate is a validated PATCH /v1/instances/{id}: a new name, a new receiver (delivery)
// or the receiver removed (removeDelivery).
type instanceUpdate struct {
	id, key, fingerprint string
	name                 *string
	delivery             *deliveryConfig
	removeDelivery       bool
}

// updateInstance applies an update to a provisioned instance, or returns the result of the update
// its Idempotency-Key already made (replayed), without applying it again. A new receiver is checked
// and verified before any part of the update commits (a *refusal says why it did not); the instance's
// undelivered notifications then go to it. Removing the receiver ends their delivery.
func (s *Server) updateInstance(ctx context.Context, u instanceUpdate, delay func() error) (provider.Instance, bool, error) {
	lock := "update\x00" + requestKey(u.id, u.key)
	if !s.acquire(ctx, lock) {
		return provider.Instance{}, false, errAborted
	}
	defer s.release(lock)
	if err := delay(); err != nil {
		return provider.Instance{}, false, err
	}
	if inst, replayed, err := s.updateReplay(u); replayed || err != nil {
		return inst, replayed, err
	}
	if u.delivery != nil {
		if rp, ok := s.admitDelivery(ctx, u.id, u.delivery); !ok {
			return provider.Instance{}, false, &refusal{rp}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return provider.Instance{}, false, errAborted
	}
	ir, ok := s.instances[u.id]
	if !ok || ir.deleted() { // deleted while the receiver was being verified: deletion wins
		return provider.Instance{}, false, errInstanceNotFound
	}
	if u.name != nil {
		ir.Name = *u.name
	}
	removed := u.removeDelivery && ir.Delivery != nil
	switch {
	case u.delivery != nil:
		ir.Delivery = u.delivery
	case u.removeDelivery:
		ir.Delivery = nil
	}
	ur := updateRecord{Fingerprint: u.fingerprint, CommittedAt: s.now(), Result: ir.wire()}
	ended, err := s.store.updateInstance(ir, u.key, ur, removed)
	if err != nil {
		return provider.Instance{}, false, err
	}
	s.instances[ir.ID] = ir
	s.deliveries.forget(ended)
	if u.delivery != nil {
		if err := s.redeliverLocked(ir.ID); err != nil {
			s.log.Error(err, "moving notifications to the new receiver", "instance", ir.ID)
		}
	}
	s.log.Info("instance updated", "instance", ir.ID, "name", ir.Name, "webhook", ir.Delivery != nil)
	return ur.Result, false, nil
}

// updateReplay returns the result of the update a key already made (replayed), or an error if the
// instance is gone or the key cannot be used; neither if the key is free.
func (s *Server) updateReplay(u instanceUpdate) (provider.Instance, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ir, ok := s.instances[u.id]
	if !ok || ir.deleted() {
		return provider.Instance{}, false, errInstanceNotFound
	}
	ur, found, err := s.store.update(u.id, u.key)
	switch {
	case err != nil:
		return provider.Instance{}, false, err
	case found && ur.Fingerprint != u.fingerprint:
		return provider.Instance{}, false, errKeyConflict
	case found:
		return ur.Result, true, nil
	}
	return provider.Instance{}, false, nil
}

// deleteInstance retires a provisioned instance: it revokes its credential, ends its pending
// requests (cancelled; expired if their deadline has passed) without notifications, as AAP says, and
// ends the delivery of its undelivered notifications, in one transaction, so that no request is left
// pending, no credential active and no notification sent (attempts in flight may still arrive). Terminal requests stay as they are. Deleting a deleted
// instance again succeeds while its record is kept.
func (s *Server) deleteInstance(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ir, ok := s.instances[id]
	if !ok {
		return errInstanceNotFound
	}
	if ir.deleted() {
		return nil
	}
	now := s.now()
	var ended []record
	for reqID := range s.pending {
		rec, found, err := s.store.request(reqID)
		if err != nil {
			return err
		}
		if !found || rec.Instance != id || rec.Status != provider.StatusPending {
			continue
		}
		if s.clock.Now().Before(rec.DeadlineAt) {
			ended = append(ended, terminal(rec, provider.Decision{Status: provider.StatusCancelled, DecidedAt: &now}))
		} else {
			deadline := rec.DeadlineAt
			ended = append(ended, terminal(rec, provider.Decision{Status: provider.StatusExpired, DecidedAt: &deadline}))
		}
	}
	ir.DeletedAt = &now
	stopped, err := s.store.deleteInstance(ir, ended)
	if err != nil {
		return err
	}
	s.deliveries.forget(stopped)
	if h, err := credentialHash(ir.Credential); err == nil {
		s.credMu.Lock()
		delete(s.creds, h)
		s.credMu.Unlock()
	}
	ir.Credential, ir.Delivery = "", nil
	s.instances[id] = ir
	for _, rec := range ended {
		s.finishedLocked(rec)
	}
	s.log.Info("instance deleted", "instance", id, "requests ended", len(ended))
	return nil
}

// instanceNamesLocked maps every instance's id to its name.
func (s *Server) instanceNamesLocked() map[string]string {
	names := map[string]string{s.defaultInstance.ID: s.defaultInstance.Name}
	for id, ir := range s.instances {
		names[id] = ir.Name
	}
	return names
}
