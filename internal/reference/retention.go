package reference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"toolgate.dev/toolgate/internal/provider"
)

// Retention. A request and its idempotency key are kept while it is pending and for
// Options.Retention (at least seven days) after its decision.decided_at; then both are purged, so
// that reusing the key creates a new request. A deleted instance's record, which makes a repeated
// deletion answer 204 and a provisioning replay answer instance_deleted, is kept for as long after
// its deletion, and so is an update's key after the update committed. A request with a notification
// is also kept until deliveryGrace (24h) after its delivery ended (acknowledged, retries run out,
// delivery removed or the instance deleted), as AAP asks. A live instance's
// provisioning key, and the credential its result holds for replays, is kept for as long after the
// provisioning, as AAP asks and no longer: reusing the key then provisions a new instance. The purge
// runs when the server starts and then every purgeEvery by the server's clock.

// purgeEvery is how often the purge runs.
const purgeEvery = time.Hour

// startPurge runs a first purge and then one on every tick of the server's clock.
func (s *Server) startPurge() error {
	if _, err := s.Purge(); err != nil {
		return err
	}
	ticks := s.clock.Tick(purgeEvery)
	go func() {
		for {
			select {
			case <-ticks:
				if _, err := s.Purge(); err != nil {
					s.log.Error(err, "purging records past their retention")
				}
			case <-s.done:
				return
			}
		}
	}()
	return nil
}

// Purge removes what the retention no longer requires (see Options.Retention) and returns how many
// requests it removed.
func (s *Server) Purge() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, nil
	}
	now := s.clock.Now()
	requests, instances, err := s.store.purge(now.Add(-s.opts.Retention), now.Add(-deliveryGrace))
	if err != nil {
		return 0, err
	}
	for _, id := range instances {
		delete(s.instances, id)
	}
	if requests > 0 || len(instances) > 0 {
		s.stats.update(func(st *Stats) { st.Purged += int64(requests) })
		s.log.Info("purged records past their retention", "requests", requests, "instances", len(instances))
	}
	return requests, nil
}

// purge deletes, in one transaction, the notifications whose delivery ended before graceCutoff, the
// terminal requests decided before cutoff with their keys (unless a notification of theirs is still
// kept), the instances deleted before cutoff with their provisioning and update keys, and the update
// keys committed before cutoff.
func (st *store) purge(cutoff, graceCutoff time.Time) (requests int, instances []string, err error) {
	err = st.db.Update(func(tx *bolt.Tx) error {
		notified, err := purgeEvents(tx, graceCutoff)
		if err != nil {
			return err
		}
		n, err := st.purgeRequests(tx, cutoff, notified)
		if err != nil {
			return err
		}
		requests = n
		instances, err = purgeInstances(tx, cutoff)
		return err
	})
	return requests, instances, err
}

func (st *store) purgeRequests(tx *bolt.Tx, cutoff time.Time, notified map[string]bool) (int, error) {
	reqs, keys, order := tx.Bucket(bucketRequests), tx.Bucket(bucketRequestKeys), tx.Bucket(bucketOrder)
	var seqs, ids, keyNames [][]byte
	err := order.ForEach(func(seq, id []byte) error {
		var rec record
		found, err := get(reqs, string(id), &rec)
		if err != nil || !found {
			return err
		}
		d := rec.Decision
		if !provider.IsTerminal(rec.Status) || d == nil || d.DecidedAt == nil || !d.DecidedAt.Before(cutoff) || notified[rec.ID] {
			return nil
		}
		rec = st.normalise(rec)
		seqs, ids = append(seqs, bytes.Clone(seq)), append(ids, bytes.Clone(id))
		if rec.Key != "" {
			keyNames = append(keyNames, []byte(requestKey(rec.Instance, rec.Key)))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for i := range seqs {
		if err := errors.Join(order.Delete(seqs[i]), reqs.Delete(ids[i])); err != nil {
			return 0, err
		}
	}
	for _, k := range keyNames {
		if err := keys.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}

func purgeInstances(tx *bolt.Tx, cutoff time.Time) ([]string, error) {
	insts, provisions, updates := tx.Bucket(bucketInstances), tx.Bucket(bucketProvisions), tx.Bucket(bucketUpdates)
	var gone []instanceRecord
	err := insts.ForEach(func(k, v []byte) error {
		var ir instanceRecord
		if err := json.Unmarshal(v, &ir); err != nil {
			return fmt.Errorf("decoding instance %q: %w", k, err)
		}
		if ir.DeletedAt != nil && ir.DeletedAt.Before(cutoff) {
			gone = append(gone, ir)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	deleted := map[string]bool{}
	var ids []string
	for _, ir := range gone {
		deleted[ir.ID] = true
		ids = append(ids, ir.ID)
		if err := insts.Delete([]byte(ir.ID)); err != nil {
			return nil, err
		}
	}
	if err := purgeProvisions(provisions, cutoff, deleted); err != nil {
		return nil, err
	}
	var stale [][]byte
	err = updates.ForEach(func(k, v []byte) error {
		var ur updateRecord
		if err := json.Unmarshal(v, &ur); err != nil {
			return fmt.Errorf("decoding instance update %q: %w", k, err)
		}
		instance, _, _ := bytes.Cut(k, []byte{0})
		if deleted[string(instance)] || ur.CommittedAt.Before(cutoff) {
			stale = append(stale, bytes.Clone(k))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, k := range stale {
		if err := updates.Delete(k); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// purgeProvisions deletes the provisioning keys of the instances purged (deleted), and those of live
// instances provisioned before cutoff, with the credential their result holds: a replay hands the
// credential out for the retention AAP asks, never for as long as the instance lives.
func purgeProvisions(provisions *bolt.Bucket, cutoff time.Time, deleted map[string]bool) error {
	var stale [][]byte
	err := provisions.ForEach(func(k, v []byte) error {
		var pr provisionRecord
		if err := json.Unmarshal(v, &pr); err != nil {
			return fmt.Errorf("decoding provisioning %q: %w", k, err)
		}
		if deleted[pr.InstanceID] || (pr.Result != nil && pr.CreatedAt.Before(cutoff)) {
			stale = append(stale, bytes.Clone(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range stale {
		if err := provisions.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
