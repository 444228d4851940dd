package reference

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"time"

	"toolgate.dev/toolgate/internal/provider"
)

// snapshot is the state the page shows.
type snapshot struct {
	Now     time.Time  `json:"now"` // the server clock's, so the page counts down the same way
	Pending []pageItem `json:"pending"`
	Recent  []pageItem `json:"recent"` // decided, expired or cancelled, most recently first
}

// pageItem is a request as the page shows it. Every text a submission chose is shown with the
// characters a reader could not see or tell apart written as escapes (see prettyJSON).
type pageItem struct {
	ID     string `json:"id"`
	Tool   string `json:"tool"`
	Status string `json:"status"`
	// Arguments is the pretty-printed JSON text; the page shows it as text.
	Arguments string `json:"arguments"`
	// AgentReasoning is the agent's own explanation, which the page presents as the agent's claim.
	AgentReasoning string `json:"agent_reasoning,omitempty"`
	// Context is the pretty-printed context object: what the adapter says it observed.
	Context string `json:"context,omitempty"`
	// Preview is the context's preview: what the tool says the call would do (ui_preview.go).
	Preview *pagePreview `json:"preview,omitempty"`
	// InstanceID and InstanceName say which instance (whose credential) submitted the request.
	InstanceID   string `json:"instance_id"`
	InstanceName string `json:"instance_name"`
	// IdempotencyKey is the key the request was submitted with; Toolgate sends the ToolCall's UID.
	IdempotencyKey string     `json:"idempotency_key,omitempty"`
	CreatedAt      *time.Time `json:"created_at"`
	DeadlineAt     *time.Time `json:"deadline_at"`
	Note           string     `json:"note,omitempty"`
	DecidedAt      *time.Time `json:"decided_at,omitempty"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	// ApprovalsRequired and ApprovalsNeeded are the request's quorum and how many more approvals it
	// needs; Votes the votes so far (quorum.go).
	ApprovalsRequired int        `json:"approvals_required"`
	ApprovalsNeeded   int        `json:"approvals_needed"`
	Votes             []pageVote `json:"votes"`
}

// pageVote is a vote as the page shows it.
type pageVote struct {
	Approver string    `json:"approver"`
	Vote     string    `json:"vote"`
	Note     string    `json:"note,omitempty"`
	At       time.Time `json:"at"`
}

// snapshot reads the state the page shows and, for each pending request, the channel closed when it
// leaves pending (decided, cancelled or expired).
func (p *approvalPage) snapshot(approver string) (snapshot, []<-chan struct{}, error) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := s.store.requests()
	if err != nil {
		return snapshot{}, nil, err
	}
	names := s.instanceNamesLocked()
	snap := snapshot{Now: s.now(), Pending: []pageItem{}, Recent: []pageItem{}}
	var (
		changes []<-chan struct{}
		done    []record
	)
	for _, rec := range all {
		if rec, err = s.expireIfDueLocked(rec); err != nil {
			return snapshot{}, nil, err
		}
		if !s.sees(approver, rec.Instance) {
			continue
		}
		if rec.Status != provider.StatusPending {
			done = append(done, rec)
			continue
		}
		snap.Pending = append(snap.Pending, newPageItem(rec, names))
		if w := s.pending[rec.ID]; w != nil {
			changes = append(changes, w.changed)
		}
	}
	slices.SortStableFunc(done, func(a, b record) int { return decidedAt(b).Compare(decidedAt(a)) })
	for _, rec := range done[:min(len(done), recentLimit)] {
		snap.Recent = append(snap.Recent, newPageItem(rec, names))
	}
	return snap, changes, nil
}

// decidedAt is when a request left pending.
func decidedAt(rec record) time.Time {
	if rec.Decision == nil || rec.Decision.DecidedAt == nil {
		return time.Time{}
	}
	return *rec.Decision.DecidedAt
}

func newPageItem(rec record, names map[string]string) pageItem {
	item := pageItem{
		ID: rec.ID, Tool: visibleText(rec.Tool), Status: rec.Status, Arguments: prettyJSON(rec.Arguments),
		AgentReasoning: visibleProse(rec.AgentReasoning), InstanceID: rec.Instance, InstanceName: visibleText(names[rec.Instance]),
		IdempotencyKey: visibleText(rec.Key), CreatedAt: &rec.CreatedAt, DeadlineAt: &rec.DeadlineAt,
		ApprovalsRequired: rec.required(), ApprovalsNeeded: rec.needed(), Votes: []pageVote{},
	}
	for _, v := range rec.Votes {
		item.Votes = append(item.Votes, pageVote{Approver: visibleText(v.Approver), Vote: v.Vote, Note: visibleProse(v.Note), At: v.At})
	}
	if len(rec.Context) > 0 {
		item.Context = prettyJSON(rec.Context)
		item.Preview = newPagePreview(rec.Context)
	}
	if d := rec.Decision; d != nil {
		item.Note, item.DecidedAt, item.ExpiresAt = d.Note, d.DecidedAt, d.ExpiresAt
	}
	return item
}

// handleEvents streams a "snapshot" event now and after every change: a new request, a vote, or a
// pending one leaving pending. The stream ends with the session; the browser then reconnects and is
// refused.
func (p *approvalPage) handleEvents(w http.ResponseWriter, r *http.Request) {
	expiry, ok := p.sessionExpiry(r)
	if !ok {
		write(w, signInRequired())
		return
	}
	sessionEnd := p.s.clock.NewTimer(expiry.Sub(p.s.clock.Now()))
	defer sessionEnd.Stop()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		return
	}
	ticker := time.NewTicker(keepAlive)
	defer ticker.Stop()
	for {
		created := p.created.wait() // before the snapshot, so no submission falls in between
		snap, changes, err := p.snapshot(p.approver(r))
		if err != nil {
			select {
			case <-p.s.done: // the store closed under us
			default:
				p.s.log.Error(err, "approval page: reading the requests")
			}
			return
		}
		data, err := json.Marshal(snap)
		if err != nil {
			p.s.log.Error(err, "approval page: encoding a snapshot")
			return
		}
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", data); err != nil || rc.Flush() != nil {
			return
		}
		if !p.waitForChange(r, rc, w, ticker, sessionEnd.C(), created, changes) {
			return
		}
	}
}

// waitForChange blocks until a request is created or leaves pending (true), or the client goes away,
// the server closes or the session ends (false). It sends a keep-alive comment on every tick meanwhile.
func (p *approvalPage) waitForChange(r *http.Request, rc *http.ResponseController, w http.ResponseWriter,
	ticker *time.Ticker, sessionEnd <-chan time.Time, created <-chan struct{}, changes []<-chan struct{}) bool {
	const clientGone, serverDone, sessionEnded, tick = 0, 1, 2, 3 // then created, then changes
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(r.Context().Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.s.done)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(sessionEnd)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ticker.C)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(created)},
	}
	for _, ch := range changes {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	for {
		chosen, _, _ := reflect.Select(cases)
		switch chosen {
		case clientGone, serverDone, sessionEnded:
			return false
		case tick:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return false
			}
		default:
			return true
		}
	}
}

// broadcast wakes every waiter once per notify.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel that the next notify closes.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
