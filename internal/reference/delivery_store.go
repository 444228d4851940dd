package reference

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketEvents holds request.resolved notifications: event id -> eventRecord. An event is written in
// the transaction that records its request's outcome, so that no outcome is stored without its
// notification. It stays after delivery ends (acknowledged, given up, or ended by removing delivery
// or deleting the instance), marked ended, so that the request it names is retained for
// deliveryGrace more; the purge then removes both.
var bucketEvents = []byte("webhook_events")

// eventRecord is a request.resolved notification and the state of its delivery.
type eventRecord struct {
	ID        string    `json:"id"`
	Instance  string    `json:"instance_id"`
	RequestID string    `json:"request_id"`
	CreatedAt time.Time `json:"created_at"`
	// Body is the exact JSON sent on every attempt.
	Body     string    `json:"body"`
	Attempts int       `json:"attempts"`
	NextAt   time.Time `json:"next_at"`
	// EndedAt is when delivery ended; Outcome says how: delivered, expired (retries ran out),
	// removed (delivery removed) or deleted (instance deleted).
	EndedAt *time.Time `json:"ended_at,omitempty"`
	Outcome string     `json:"outcome,omitempty"`
}

func (ev eventRecord) ended() bool { return ev.EndedAt != nil }

// finishRequest stores a request's outcome and, if ev is not nil, its notification, in one transaction.
func (st *store) finishRequest(rec record, ev *eventRecord) error {
	return st.db.Update(func(tx *bolt.Tx) error {
		if err := put(tx.Bucket(bucketRequests), rec.ID, rec); err != nil {
			return err
		}
		if ev == nil {
			return nil
		}
		return put(tx.Bucket(bucketEvents), ev.ID, *ev)
	})
}

// event returns a stored event; found is false if there is none.
func (st *store) event(id string) (ev eventRecord, found bool, err error) {
	err = st.db.View(func(tx *bolt.Tx) error {
		found, err = get(tx.Bucket(bucketEvents), id, &ev)
		return err
	})
	return ev, found, err
}

// putEvent overwrites a stored event.
func (st *store) putEvent(ev eventRecord) error {
	return st.db.Update(func(tx *bolt.Tx) error { return put(tx.Bucket(bucketEvents), ev.ID, ev) })
}

// events returns every stored event, ended ones too.
func (st *store) events() ([]eventRecord, error) {
	var all []eventRecord
	err := st.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEvents).ForEach(func(k, v []byte) error {
			var ev eventRecord
			if err := json.Unmarshal(v, &ev); err != nil {
				return fmt.Errorf("decoding event %q: %w", k, err)
			}
			all = append(all, ev)
			return nil
		})
	})
	return all, err
}

// endEventsTx marks every undelivered event of an instance ended (outcome), inside tx, and returns
// their ids.
func endEventsTx(tx *bolt.Tx, instance, outcome string, at time.Time) ([]string, error) {
	b := tx.Bucket(bucketEvents)
	var ended []eventRecord
	err := b.ForEach(func(k, v []byte) error {
		var ev eventRecord
		if err := json.Unmarshal(v, &ev); err != nil {
			return fmt.Errorf("decoding event %q: %w", k, err)
		}
		if ev.Instance == instance && !ev.ended() {
			ev.EndedAt, ev.Outcome = &at, outcome
			ended = append(ended, ev)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(ended))
	for _, ev := range ended {
		if err := put(b, ev.ID, ev); err != nil {
			return nil, err
		}
		ids = append(ids, ev.ID)
	}
	return ids, nil
}

// purgeEvents removes, inside tx, the events whose delivery ended before graceCutoff and returns the
// requests whose events are still kept (outstanding, or ended at or after graceCutoff): the purge
// keeps those requests.
func purgeEvents(tx *bolt.Tx, graceCutoff time.Time) (map[string]bool, error) {
	b := tx.Bucket(bucketEvents)
	keep := map[string]bool{}
	var gone [][]byte
	err := b.ForEach(func(k, v []byte) error {
		var ev eventRecord
		if err := json.Unmarshal(v, &ev); err != nil {
			return fmt.Errorf("decoding event %q: %w", k, err)
		}
		if ev.ended() && ev.EndedAt.Before(graceCutoff) {
			gone = append(gone, []byte(ev.ID))
		} else {
			keep[ev.RequestID] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, k := range gone {
		if err := b.Delete(k); err != nil {
			return nil, err
		}
	}
	return keep, nil
}
