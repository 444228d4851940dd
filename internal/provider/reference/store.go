package reference

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"toolgate.dev/toolgate/internal/provider"
)

var (
	bucketRequests    = []byte("requests")          // id -> provider.Request
	bucketOrder       = []byte("requests_by_order") // big-endian creation sequence -> id
	bucketIdempotency = []byte("idempotency_keys")  // Idempotency-Key -> idempotencyRecord
)

// idempotencyRecord binds an Idempotency-Key to the request its first submission created.
type idempotencyRecord struct {
	Fingerprint string    `json:"fingerprint"`
	RequestID   string    `json:"request_id"`
	CreatedAt   time.Time `json:"created_at"`
}

// store keeps requests and idempotency keys in a bbolt file.
type store struct {
	db *bolt.DB
}

func openStore(path string, noSync bool) (*store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, NoSync: noSync})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketRequests, bucketOrder, bucketIdempotency} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("initialising %s: %w", path, err), db.Close())
	}
	return &store{db: db}, nil
}

func (st *store) close() error { return st.db.Close() }

// request returns the stored request with the given id; found is false if there is none.
func (st *store) request(id string) (req provider.Request, found bool, err error) {
	err = st.db.View(func(tx *bolt.Tx) error {
		found, err = get(tx.Bucket(bucketRequests), id, &req)
		return err
	})
	return req, found, err
}

// idempotency returns the record for an Idempotency-Key; found is false if the key is unused.
func (st *store) idempotency(key string) (rec idempotencyRecord, found bool, err error) {
	err = st.db.View(func(tx *bolt.Tx) error {
		found, err = get(tx.Bucket(bucketIdempotency), key, &rec)
		return err
	})
	return rec, found, err
}

// create stores a new request and the idempotency key that created it in one transaction.
func (st *store) create(key string, rec idempotencyRecord, req provider.Request) error {
	return st.db.Update(func(tx *bolt.Tx) error {
		if err := put(tx.Bucket(bucketRequests), req.ID, req); err != nil {
			return err
		}
		order := tx.Bucket(bucketOrder)
		seq, err := order.NextSequence()
		if err != nil {
			return err
		}
		if err := order.Put(binary.BigEndian.AppendUint64(nil, seq), []byte(req.ID)); err != nil {
			return err
		}
		return put(tx.Bucket(bucketIdempotency), key, rec)
	})
}

// putRequest overwrites a stored request.
func (st *store) putRequest(req provider.Request) error {
	return st.db.Update(func(tx *bolt.Tx) error {
		return put(tx.Bucket(bucketRequests), req.ID, req)
	})
}

// requests returns every stored request, newest first.
func (st *store) requests() ([]provider.Request, error) {
	var all []provider.Request
	err := st.db.View(func(tx *bolt.Tx) error {
		requests := tx.Bucket(bucketRequests)
		c := tx.Bucket(bucketOrder).Cursor()
		for _, id := c.Last(); id != nil; _, id = c.Prev() {
			var req provider.Request
			found, err := get(requests, string(id), &req)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("request %q is indexed but not stored", id)
			}
			all = append(all, req)
		}
		return nil
	})
	return all, err
}

// keys maps every Idempotency-Key to the id of the request it created.
func (st *store) keys() (map[string]string, error) {
	out := map[string]string{}
	err := st.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIdempotency).ForEach(func(k, v []byte) error {
			var rec idempotencyRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decoding %q: %w", k, err)
			}
			out[string(k)] = rec.RequestID
			return nil
		})
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

func put(b *bolt.Bucket, key string, value any) error {
	v, err := json.Marshal(value)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), v)
}
