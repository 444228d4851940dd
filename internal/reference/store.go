package reference

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"toolgate.dev/toolgate/internal/provider"
)

var (
	bucketRequests    = []byte("requests")            // id -> record
	bucketOrder       = []byte("requests_by_order")   // big-endian creation sequence -> id
	bucketRequestKeys = []byte("request_keys")        // instance id \x00 Idempotency-Key -> keyRecord
	bucketInstances   = []byte("instances")           // instance id -> instanceRecord
	bucketCredentials = []byte("instance_creds")      // hex SHA-256 of a credential -> instance id
	bucketProvisions  = []byte("instance_provisions") // provisioning Idempotency-Key -> provisionRecord
	bucketUpdates     = []byte("instance_updates")    // instance id \x00 Idempotency-Key -> updateRecord
	// bucketLegacyKeys held the request keys before instances existed (Idempotency-Key -> {fingerprint,
	// request_id, created_at}); openStore moves them to bucketRequestKeys under the default instance.
	bucketLegacyKeys = []byte("idempotency_keys")
)

// record is a request as the store keeps it: the AAP request, the instance it belongs to and the
// Idempotency-Key that created it. Requests stored before instances existed have no instance_id:
// they belong to the default instance.
type record struct {
	ID             string             `json:"id"`
	Instance       string             `json:"instance_id,omitempty"`
	Key            string             `json:"idempotency_key,omitempty"`
	Tool           string             `json:"tool"`
	Arguments      json.RawMessage    `json:"arguments"`
	AgentReasoning string             `json:"agent_reasoning,omitempty"`
	Context        json.RawMessage    `json:"context,omitempty"`
	Timeout        string             `json:"timeout"`
	Status         string             `json:"status"`
	CreatedAt      time.Time          `json:"created_at"`
	DeadlineAt     time.Time          `json:"deadline_at"`
	Decision       *provider.Decision `json:"decision,omitempty"`
	// Quorum is how many distinct approvals the request needs (quorum.go); 0, in requests stored
	// before quorums existed, is one.
	Quorum int `json:"quorum,omitempty"`
	// Votes are the approvers' approvals and denial, in the order they came.
	Votes []Vote `json:"votes,omitempty"`
}

// keyRecord binds an instance's Idempotency-Key to the request its first submission created.
type keyRecord struct {
	Fingerprint string    `json:"fingerprint"`
	RequestID   string    `json:"request_id"`
	CreatedAt   time.Time `json:"created_at"`
}

// requestKey is the store key of an instance's Idempotency-Key: keys are scoped to the instance.
func requestKey(instance, key string) string { return instance + "\x00" + key }

// store keeps requests, instances and idempotency keys in a bbolt file.
type store struct {
	db              *bolt.DB
	defaultInstance string // the instance of requests stored without one
}

func openStore(path string, noSync bool, defaultInstance string) (*store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, NoSync: noSync})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	st := &store{db: db, defaultInstance: defaultInstance}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketRequests, bucketOrder, bucketRequestKeys, bucketInstances,
			bucketCredentials, bucketProvisions, bucketUpdates, bucketEvents, bucketGrants} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return st.migrateLegacyKeys(tx)
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("initialising %s: %w", path, err), db.Close())
	}
	return st, nil
}

// migrateLegacyKeys moves the request keys of a store written before instances existed to the
// default instance, with the fingerprint of their request's fields.
func (st *store) migrateLegacyKeys(tx *bolt.Tx) error {
	legacy := tx.Bucket(bucketLegacyKeys)
	if legacy == nil {
		return nil
	}
	keys, requests := tx.Bucket(bucketRequestKeys), tx.Bucket(bucketRequests)
	err := legacy.ForEach(func(k, v []byte) error {
		var old struct {
			RequestID string    `json:"request_id"`
			CreatedAt time.Time `json:"created_at"`
		}
		if err := json.Unmarshal(v, &old); err != nil {
			return fmt.Errorf("decoding idempotency key %q: %w", k, err)
		}
		var rec record
		found, err := get(requests, old.RequestID, &rec)
		if err != nil || !found {
			return err // a key without its request cannot be replayed: leave it behind
		}
		fp, err := fingerprint(rec.Tool, rec.Arguments, rec.Timeout, rec.AgentReasoning, rec.Context)
		if err != nil {
			return err
		}
		rec.Instance, rec.Key = st.defaultInstance, string(k)
		if err := put(requests, rec.ID, rec); err != nil {
			return err
		}
		return put(keys, requestKey(st.defaultInstance, string(k)), keyRecord{Fingerprint: fp, RequestID: rec.ID, CreatedAt: old.CreatedAt})
	})
	if err != nil {
		return err
	}
	return tx.DeleteBucket(bucketLegacyKeys)
}

func (st *store) close() error { return st.db.Close() }

// normalise gives a record stored before instances existed its instance.
func (st *store) normalise(rec record) record {
	if rec.Instance == "" {
		rec.Instance = st.defaultInstance
	}
	return rec
}

// request returns the stored request with the given id; found is false if there is none.
func (st *store) request(id string) (rec record, found bool, err error) {
	err = st.db.View(func(tx *bolt.Tx) error {
		found, err = get(tx.Bucket(bucketRequests), id, &rec)
		return err
	})
	return st.normalise(rec), found, err
}

// requestKey returns the record of an instance's Idempotency-Key; found is false if the key is unused.
func (st *store) requestKey(instance, key string) (rec keyRecord, found bool, err error) {
	err = st.db.View(func(tx *bolt.Tx) error {
		found, err = get(tx.Bucket(bucketRequestKeys), requestKey(instance, key), &rec)
		return err
	})
	return rec, found, err
}

// create stores a new request and the idempotency key that created it in one transaction.
func (st *store) create(kr keyRecord, rec record) error {
	return st.db.Update(func(tx *bolt.Tx) error {
		if err := put(tx.Bucket(bucketRequests), rec.ID, rec); err != nil {
			return err
		}
		order := tx.Bucket(bucketOrder)
		seq, err := order.NextSequence()
		if err != nil {
			return err
		}
		if err := order.Put(binary.BigEndian.AppendUint64(nil, seq), []byte(rec.ID)); err != nil {
			return err
		}
		return put(tx.Bucket(bucketRequestKeys), requestKey(rec.Instance, rec.Key), kr)
	})
}

// requests returns every stored request, newest first.
func (st *store) requests() ([]record, error) {
	var all []record
	err := st.db.View(func(tx *bolt.Tx) error {
		requests := tx.Bucket(bucketRequests)
		c := tx.Bucket(bucketOrder).Cursor()
		for _, id := c.Last(); id != nil; _, id = c.Prev() {
			var rec record
			found, err := get(requests, string(id), &rec)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("request %q is indexed but not stored", id)
			}
			all = append(all, st.normalise(rec))
		}
		return nil
	})
	return all, err
}

// keysOf maps every Idempotency-Key of an instance to the id of the request it created.
func (st *store) keysOf(instance string) (map[string]string, error) {
	out := map[string]string{}
	prefix := []byte(requestKey(instance, ""))
	err := st.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketRequestKeys).Cursor()
		for k, v := c.Seek(prefix); k != nil && len(k) >= len(prefix) && string(k[:len(prefix)]) == string(prefix); k, v = c.Next() {
			var rec keyRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decoding %q: %w", k, err)
			}
			out[string(k[len(prefix):])] = rec.RequestID
		}
		return nil
	})
	return out, err
}

func get(b *bolt.Bucket, key string, into any) (bool, error) {
	v := b.Get([]byte(key))
	if v == nil {
		return false, nil
	}
	if err := json.Unmarshal(v, into); err != nil {
		return false, fmt.Errorf("decoding %q: %w", key, err)
	}
	return true, nil
}

// put stores value as JSON, keeping what was submitted as it was sent (no HTML escaping).
func put(b *bolt.Bucket, key string, value any) error {
	var v bytes.Buffer
	enc := json.NewEncoder(&v)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(value); err != nil {
		return err
	}
	return b.Put([]byte(key), bytes.TrimSuffix(v.Bytes(), []byte("\n")))
}
