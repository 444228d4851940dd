package reference

import bolt "go.etcd.io/bbolt"

// Keys returns every Idempotency-Key the server has seen, with the id of the request it created.
// Audits use it to check that each caller key created exactly one request.
func (s *Server) Keys() (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	err := s.store.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIdempotency).ForEach(func(k, v []byte) error {
			var rec idempotencyRecord
			if _, err := get(tx.Bucket(bucketIdempotency), string(k), &rec); err != nil {
				return err
			}
			out[string(k)] = rec.RequestID
			return nil
		})
	})
	return out, err
}
