package reference

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"toolgate.dev/toolgate/internal/provider"
)

// instanceRecord is an instance as the store keeps it. A deleted instance keeps its record (without
// a credential) for the retention period, so that repeated deletion answers 204 and a replay of its
// provisioning answers instance_deleted.
type instanceRecord struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	DeletedAt *time.Time `json:"deleted_at,omitempty"`
	// Credential is the hex SHA-256 of the instance's credential; empty once deleted.
	Credential string `json:"credential_sha256,omitempty"`
	// CredentialExpiresAt is when the credential expires (Options.CredentialLifetime); nil for never.
	CredentialExpiresAt *time.Time `json:"credential_expires_at,omitempty"`
	// ProvisionKey is the Idempotency-Key of the provisioning that created it.
	ProvisionKey string `json:"provision_key"`
	// Delivery is its verified webhook receiver, secret included; nil for none.
	Delivery *deliveryConfig `json:"delivery,omitempty"`
	// Quorum is how many distinct approvals its new requests need; 0 for the provider's default
	// (Options.Quorum).
	Quorum int `json:"quorum,omitempty"`
}

func (ir instanceRecord) deleted() bool { return ir.DeletedAt != nil }

// wire is the instance as answers show it: its receiver without the secret.
func (ir instanceRecord) wire() provider.Instance {
	return provider.Instance{ID: ir.ID, Name: ir.Name, Delivery: ir.Delivery.wire()}
}

// provisionRecord binds a provisioning Idempotency-Key to the instance it created and to the original
// result, so that a replay returns the same instance and credential. Deletion drops the result (the
// credential with it): a replay then answers instance_deleted.
type provisionRecord struct {
	Fingerprint string                              `json:"fingerprint"`
	InstanceID  string                              `json:"instance_id"`
	CreatedAt   time.Time                           `json:"created_at"`
	Result      *provider.ProvisionInstanceResponse `json:"result,omitempty"`
}

// updateRecord binds an update's Idempotency-Key (scoped to its instance) to its original result.
type updateRecord struct {
	Fingerprint string            `json:"fingerprint"`
	CommittedAt time.Time         `json:"committed_at"`
	Result      provider.Instance `json:"result"`
}

// instances returns every stored instance record.
func (st *store) instances() ([]instanceRecord, error) {
	var all []instanceRecord
	err := st.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketInstances).ForEach(func(k, v []byte) error {
			var ir instanceRecord
			if err := json.Unmarshal(v, &ir); err != nil {
				return fmt.Errorf("decoding instance %q: %w", k, err)
			}
			all = append(all, ir)
			return nil
		})
	})
	return all, err
}

// provision returns the record of a provisioning Idempotency-Key; found is false if it is unused.
func (st *store) provision(key string) (rec provisionRecord, found bool, err error) {
	err = st.db.View(func(tx *bolt.Tx) error {
		found, err = get(tx.Bucket(bucketProvisions), key, &rec)
		return err
	})
	return rec, found, err
}

// createInstance stores a new instance, its credential and its provisioning record in one transaction.
func (st *store) createInstance(ir instanceRecord, pr provisionRecord) error {
	return st.db.Update(func(tx *bolt.Tx) error {
		if err := put(tx.Bucket(bucketInstances), ir.ID, ir); err != nil {
			return err
		}
		if err := tx.Bucket(bucketCredentials).Put([]byte(ir.Credential), []byte(ir.ID)); err != nil {
			return err
		}
		return put(tx.Bucket(bucketProvisions), ir.ProvisionKey, pr)
	})
}

// update returns the record of an instance update's Idempotency-Key; found is false if it is unused.
func (st *store) update(instance, key string) (rec updateRecord, found bool, err error) {
	err = st.db.View(func(tx *bolt.Tx) error {
		found, err = get(tx.Bucket(bucketUpdates), requestKey(instance, key), &rec)
		return err
	})
	return rec, found, err
}

// updateInstance stores an updated instance and the record of the update in one transaction. If
// delivery was removed (removed), the instance's undelivered events end in the same transaction;
// their ids are returned.
func (st *store) updateInstance(ir instanceRecord, key string, ur updateRecord, removed bool) (ended []string, err error) {
	err = st.db.Update(func(tx *bolt.Tx) error {
		if err := put(tx.Bucket(bucketInstances), ir.ID, ir); err != nil {
			return err
		}
		if removed {
			if ended, err = endEventsTx(tx, ir.ID, "removed", ur.CommittedAt); err != nil {
				return err
			}
		}
		return put(tx.Bucket(bucketUpdates), requestKey(ir.ID, key), ur)
	})
	return ended, err
}

// deleteInstance marks an instance deleted, revokes its credential, drops the credential kept for
// provisioning replays, stores the requests it cancelled (without notifications) and ends the
// delivery of its undelivered events, all in one transaction. It returns the ended events' ids.
func (st *store) deleteInstance(ir instanceRecord, cancelled []record) (ended []string, err error) {
	err = st.db.Update(func(tx *bolt.Tx) error {
		var err error
		if ended, err = endEventsTx(tx, ir.ID, "deleted", *ir.DeletedAt); err != nil {
			return err
		}
		creds := tx.Bucket(bucketCredentials)
		if ir.Credential != "" {
			if err := creds.Delete([]byte(ir.Credential)); err != nil {
				return err
			}
		}
		ir.Credential, ir.Delivery = "", nil
		if err := put(tx.Bucket(bucketInstances), ir.ID, ir); err != nil {
			return err
		}
		provisions := tx.Bucket(bucketProvisions)
		var pr provisionRecord
		found, err := get(provisions, ir.ProvisionKey, &pr)
		if err != nil {
			return err
		}
		if found && pr.InstanceID == ir.ID {
			pr.Result = nil
			if err := put(provisions, ir.ProvisionKey, pr); err != nil {
				return err
			}
		}
		requests := tx.Bucket(bucketRequests)
		for _, rec := range cancelled {
			if err := put(requests, rec.ID, rec); err != nil {
				return err
			}
		}
		return nil
	})
	return ended, err
}

// credentials maps the hex SHA-256 of every live instance credential to its instance.
func (st *store) credentials() (map[string]string, error) {
	out := map[string]string{}
	err := st.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCredentials).ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	return out, err
}
