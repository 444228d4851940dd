package reference

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf16"

	bolt "go.etcd.io/bbolt"

	"toolgate.dev/toolgate/internal/provider"
)

// The approval page is the admin surface a person uses from a browser: GET /ui/ lists the pending
// requests and updates itself through Server-Sent Events (GET /ui/events); its buttons POST to
// /ui/api/requests/{id}/approve and /ui/api/requests/{id}/deny.
//
// Authentication. The page is protected by the admin credential, exactly like the admin API: the
// credential the admin API accepts (Options.AdminCredential, or Options.Credential when that is empty)
// is the one the page accepts, so the page is available whenever the admin API is. A browser signs in
// once by opening /ui/?token=<admin credential>: the page checks the token, sets a session cookie
// (HttpOnly, SameSite=Strict, Path=/ui/, Secure over TLS) and redirects to /ui/, so the token leaves the
// address bar and the browser history. The cookie holds an expiry and an HMAC of it under a key drawn
// at random when the server starts; it never holds the credential, cannot be used against the admin
// API, ends after sessionLifetime, and restarting the provider ends every session. Everything under
// /ui/ except the sign-in itself needs the cookie; an Authorization header is not accepted there.
//
// Cross-site request forgery. The actions require, besides the cookie: a same-origin request as
// http.CrossOriginProtection judges it (Sec-Fetch-Site, or Origin against Host), and a JSON body
// (Content-Type application/json), which an HTML form on another site cannot send. SameSite=Strict
// keeps the cookie off cross-site requests in the first place. Cross-origin actions get 403.
//
// Decisions. Approve takes valid_for_minutes, a whole number of minutes from 1 to maxValidity (or to
// Options.DefaultApprovalValidity if that is longer); anything else is refused with 400, never
// clamped. The approval's expires_at is the server clock's now plus that. Deny requires a note (the
// agent and the audit trail read it; an empty reason helps nobody). Both accept a note of at most
// maxNoteLength characters.

//go:embed ui
var uiFiles embed.FS

const (
	sessionCookie   = "toolgate_approval_session"
	sessionLifetime = 12 * time.Hour
	// maxValidity bounds the validity the page grants an approval (raised to DefaultApprovalValidity if
	// that is larger).
	maxValidity   = 24 * time.Hour
	maxNoteLength = 1000
	// recentLimit is how many decided, expired or cancelled requests the page shows.
	recentLimit = 10
	// keepAlive is how often an idle event stream sends a comment, so that proxies keep it open.
	keepAlive = 15 * time.Second
)

// approvalPage serves /ui/.
type approvalPage struct {
	s          *Server
	page       *template.Template
	static     fs.FS
	sessionKey []byte
	csrf       *http.CrossOriginProtection
	created    broadcast // fired after every submission
}

// withApprovalPage serves the approval page under /ui/ and everything else with api. It tells the page's
// event streams about new requests: a submission is the only way to create one. Decisions,
// cancellations and expiries reach the streams through the pending requests' change channels.
func (s *Server) withApprovalPage(api http.Handler) http.Handler {
	p := newApprovalPage(s)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		target := "/ui/"
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, target, http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /ui/{$}", p.handlePage)
	mux.Handle("GET /ui/static/{name}", p.session(p.handleStatic))
	mux.HandleFunc("GET /ui/events", p.handleEvents)
	mux.Handle("POST /ui/api/requests/{id}/approve", p.action(p.handleApprove))
	mux.Handle("POST /ui/api/requests/{id}/deny", p.action(p.handleDeny))
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		write(w, problem(http.StatusNotFound, provider.CodeNotFound, "no such page: "+r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/") {
			mux.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/requests" {
			p.created.notify()
		}
	})
}

func newApprovalPage(s *Server) *approvalPage {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails
	static, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded directory exists
	}
	page := template.Must(template.New("page.html").Funcs(template.FuncMap{
		"timestamp": formatTimestamp,
	}).ParseFS(static, "page.html"))
	return &approvalPage{s: s, page: page, static: static, sessionKey: key, csrf: http.NewCrossOriginProtection()}
}

// ---------------------------------------------------------------------------------------------------
// Sessions

// session wraps a handler that needs the session cookie.
func (p *approvalPage) session(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.signedIn(r) {
			write(w, signInRequired())
			return
		}
		h(w, r)
	})
}

func signInRequired() reply {
	return problem(http.StatusUnauthorized, provider.CodeUnauthenticated,
		"no valid session: sign in by opening /ui/?token=<admin credential>")
}

// validToken reports whether token is the admin credential.
func (p *approvalPage) validToken(token string) bool {
	got := sha256.Sum256([]byte(token))
	return token != "" && subtle.ConstantTimeCompare(got[:], p.s.admin[:]) == 1
}

// newSession returns a session cookie value that expires at expiry: "<unix seconds>.<mac>".
func (p *approvalPage) newSession(expiry time.Time) string {
	exp := strconv.FormatInt(expiry.Unix(), 10)
	return exp + "." + p.mac(exp)
}

func (p *approvalPage) mac(exp string) string {
	m := hmac.New(sha256.New, p.sessionKey)
	m.Write([]byte("toolgate approval page session\x00" + exp))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (p *approvalPage) signedIn(r *http.Request) bool {
	_, ok := p.sessionExpiry(r)
	return ok
}

// sessionExpiry returns when the request's session ends; ok is false without a valid session.
func (p *approvalPage) sessionExpiry(r *http.Request) (expiry time.Time, ok bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return time.Time{}, false
	}
	exp, mac, found := strings.Cut(c.Value, ".")
	if !found || !hmac.Equal([]byte(mac), []byte(p.mac(exp))) {
		return time.Time{}, false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	expiry = time.Unix(unix, 0)
	return expiry, p.s.clock.Now().Before(expiry)
}

// ---------------------------------------------------------------------------------------------------
// The page

// handlePage signs a browser in (?token=) or renders the page for a signed-in browser.
func (p *approvalPage) handlePage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("token") {
		if !p.validToken(r.URL.Query().Get("token")) {
			signInPage(w, "That token is not the admin credential of this provider.")
			return
		}
		http.SetCookie(w, &http.Cookie{
			Name:     sessionCookie,
			Value:    p.newSession(p.s.clock.Now().Add(sessionLifetime)),
			Path:     "/ui/",
			MaxAge:   int(sessionLifetime / time.Second),
			HttpOnly: true,
			Secure:   r.TLS != nil,
			SameSite: http.SameSiteStrictMode,
		})
		pageHeaders(w, "text/html; charset=utf-8")
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	if !p.signedIn(r) {
		signInPage(w, "Sign in by opening this page with the admin credential: /ui/?token=<admin credential>.")
		return
	}
	snap, _, err := p.snapshot()
	if err != nil {
		write(w, p.s.failure(err))
		return
	}
	var buf bytes.Buffer
	err = p.page.Execute(&buf, pageView{
		Snapshot:       snap,
		DefaultMinutes: p.defaultMinutes(),
		MaxMinutes:     p.maxMinutes(),
	})
	if err != nil {
		write(w, p.s.failure(fmt.Errorf("rendering the approval page: %w", err)))
		return
	}
	pageHeaders(w, "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// pageView is what page.html renders.
type pageView struct {
	Snapshot       snapshot
	DefaultMinutes int
	MaxMinutes     int
}

// rowView is what the "request" template renders: one pending request and its controls.
type rowView struct {
	Item           pageItem
	Left           string // time left until the deadline, by the server's clock
	DefaultMinutes int
	MaxMinutes     int
}

// Row returns the view of a pending request.
func (v pageView) Row(item pageItem) rowView {
	row := rowView{Item: item, DefaultMinutes: v.DefaultMinutes, MaxMinutes: v.MaxMinutes}
	if item.DeadlineAt != nil {
		row.Left = formatLeft(item.DeadlineAt.Sub(v.Snapshot.Now))
	}
	return row
}

// Blank is the empty item the page's script fills in for requests that arrive later.
func (pageView) Blank() pageItem { return pageItem{} }

// pageHeaders sets the headers of every page response: no caching, no framing, scripts and styles
// from the page's own origin only.
func pageHeaders(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "+
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
}

// signInPage answers 401 with a page that says how to sign in.
func signInPage(w http.ResponseWriter, message string) {
	pageHeaders(w, "text/html; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	_ = signIn.Execute(w, message)
}

var signIn = template.Must(template.New("sign-in").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in: Toolgate approvals</title></head>
<body><h1>Toolgate approvals</h1><p id="sign-in">{{.}}</p></body></html>
`))

// staticFiles are the files under ui/ served as they are, with their content types.
var staticFiles = map[string]string{
	"app.js":    "text/javascript; charset=utf-8",
	"style.css": "text/css; charset=utf-8",
}

func (p *approvalPage) handleStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	contentType, known := staticFiles[name]
	data, err := fs.ReadFile(p.static, name)
	if !known || err != nil {
		write(w, problem(http.StatusNotFound, provider.CodeNotFound, "no such file: "+name))
		return
	}
	pageHeaders(w, contentType)
	_, _ = w.Write(data)
}

func (p *approvalPage) defaultMinutes() int {
	return int((p.s.opts.DefaultApprovalValidity + time.Minute - 1) / time.Minute)
}

func (p *approvalPage) maxMinutes() int {
	return max(int(maxValidity/time.Minute), p.defaultMinutes())
}

// formatLeft renders the time left until a deadline: "1h 05m", "4m 09s", "42s", or "deadline passed".
func formatLeft(d time.Duration) string {
	if d <= 0 {
		return "deadline passed"
	}
	secs := int64(d / time.Second)
	h, m, s := secs/3600, secs/60%60, secs%60
	switch {
	case h > 0:
		return fmt.Sprintf("%dh %02dm", h, m)
	case m > 0:
		return fmt.Sprintf("%dm %02ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}

// formatTimestamp renders a time.Time or *time.Time in RFC 3339, UTC; nil renders empty.
func formatTimestamp(v any) string {
	switch t := v.(type) {
	case time.Time:
		return t.UTC().Format(time.RFC3339)
	case *time.Time:
		if t != nil {
			return t.UTC().Format(time.RFC3339)
		}
	}
	return ""
}

// ---------------------------------------------------------------------------------------------------
// Snapshots and the event stream

// snapshot is the state the page shows.
type snapshot struct {
	Now     time.Time  `json:"now"` // the server clock's, so the page counts down the same way
	Pending []pageItem `json:"pending"`
	Recent  []pageItem `json:"recent"` // decided, expired or cancelled, most recently first
}

// pageItem is a request as the page shows it.
type pageItem struct {
	ID     string `json:"id"`
	Tool   string `json:"tool"`
	Status string `json:"status"`
	// Arguments is the pretty-printed JSON text; the page shows it as text.
	Arguments string `json:"arguments"`
	// IdempotencyKey is the key the request was submitted with; Toolgate sends the ToolCall's UID.
	IdempotencyKey string     `json:"idempotency_key,omitempty"`
	CreatedAt      *time.Time `json:"created_at"`
	DeadlineAt     *time.Time `json:"deadline_at"`
	Note           string     `json:"note,omitempty"`
	DecidedAt      *time.Time `json:"decided_at,omitempty"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
}

// snapshot reads the state the page shows and, for each pending request, the channel closed when it
// leaves pending (decided, cancelled or expired).
func (p *approvalPage) snapshot() (snapshot, []<-chan struct{}, error) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := s.store.requests()
	if err != nil {
		return snapshot{}, nil, err
	}
	keys, err := s.store.idempotencyKeysByRequest()
	if err != nil {
		return snapshot{}, nil, err
	}
	snap := snapshot{Now: s.now(), Pending: []pageItem{}, Recent: []pageItem{}}
	var (
		changes []<-chan struct{}
		done    []provider.Request
	)
	for _, req := range all {
		if req, err = s.expireIfDueLocked(req); err != nil {
			return snapshot{}, nil, err
		}
		if req.Status != provider.StatusPending {
			done = append(done, req)
			continue
		}
		snap.Pending = append(snap.Pending, newPageItem(req, keys[req.ID]))
		if w := s.pending[req.ID]; w != nil {
			changes = append(changes, w.changed)
		}
	}
	slices.SortStableFunc(done, func(a, b provider.Request) int { return decidedAt(b).Compare(decidedAt(a)) })
	for _, req := range done[:min(len(done), recentLimit)] {
		snap.Recent = append(snap.Recent, newPageItem(req, keys[req.ID]))
	}
	return snap, changes, nil
}

// decidedAt is when a request left pending.
func decidedAt(req provider.Request) time.Time {
	if req.Decision == nil || req.Decision.DecidedAt == nil {
		return time.Time{}
	}
	return *req.Decision.DecidedAt
}

func newPageItem(req provider.Request, key string) pageItem {
	item := pageItem{
		ID: req.ID, Tool: req.Tool, Status: req.Status, Arguments: prettyJSON(req.Arguments), IdempotencyKey: key,
		CreatedAt: &req.CreatedAt, DeadlineAt: &req.DeadlineAt,
	}
	if d := req.Decision; d != nil {
		item.Note, item.DecidedAt, item.ExpiresAt = d.Note, d.DecidedAt, d.ExpiresAt
	}
	return item
}

// prettyJSON renders a JSON document indented by two spaces, keeping its keys in their order and its
// numbers as written, so that the approver reads what was submitted. Strings show their
// characters as they are, except those a reader could not see or tell apart: control and format
// characters (such as bidirectional overrides, zero-width spaces and tag characters), separators other
// than the space, and unassigned or private-use code points are written as \u escapes. HTML-significant
// characters are not escaped here: the page always inserts the result as text.
func prettyJSON(doc []byte) string {
	type container struct {
		object bool
		tokens int // keys and values so far
	}
	var (
		b     strings.Builder
		stack []container
	)
	newline := func() {
		b.WriteByte('\n')
		b.WriteString(strings.Repeat("  ", len(stack)))
	}
	beforeValue := func() {
		if len(stack) == 0 {
			return
		}
		top := &stack[len(stack)-1]
		if top.object && top.tokens%2 == 1 {
			b.WriteString(": ")
		} else {
			if top.tokens > 0 {
				b.WriteByte(',')
			}
			newline()
		}
		top.tokens++
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return b.String()
		}
		if err != nil {
			return string(doc) // not reached for stored arguments, which were validated
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				beforeValue()
				stack = append(stack, container{object: t == '{'})
			case '}', ']':
				closed := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if closed.tokens > 0 {
					newline()
				}
			}
			b.WriteRune(rune(t))
		case string:
			beforeValue()
			writeJSONString(&b, t)
		case json.Number:
			beforeValue()
			b.WriteString(t.String())
		case bool:
			beforeValue()
			b.WriteString(strconv.FormatBool(t))
		case nil:
			beforeValue()
			b.WriteString("null")
		}
	}
}

// writeJSONString writes s as a JSON string, escaping what a reader could not see (see prettyJSON).
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
}

// idempotencyKeysByRequest maps request ids to the Idempotency-Key that created them.
func (st *store) idempotencyKeysByRequest() (map[string]string, error) {
	keys := map[string]string{}
	err := st.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIdempotency).ForEach(func(k, v []byte) error {
			var rec idempotencyRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decoding idempotency key %q: %w", k, err)
			}
			keys[rec.RequestID] = string(k)
			return nil
		})
	})
	return keys, err
}

// handleEvents streams a "snapshot" event now and after every change: a new request, or a pending one
// leaving pending. The stream ends with the session; the browser then reconnects and is refused.
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
		snap, changes, err := p.snapshot()
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

// ---------------------------------------------------------------------------------------------------
// Actions

// action wraps a decision handler: same-origin check, session, JSON body.
func (p *approvalPage) action(h func(r *http.Request, body []byte) reply) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := p.csrf.Check(r); err != nil {
			write(w, problem(http.StatusForbidden, codeCrossOrigin,
				"cross-origin request refused: approve and deny only from the approval page itself ("+err.Error()+")"))
			return
		}
		if !p.signedIn(r) {
			write(w, signInRequired())
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != provider.ContentTypeJSON {
			write(w, problem(http.StatusUnsupportedMediaType, provider.CodeInvalidRequest,
				"the body must be JSON: send Content-Type: application/json"))
			return
		}
		var raw json.RawMessage
		if err := decodeJSON(r, &raw); err != nil {
			write(w, problem(http.StatusBadRequest, provider.CodeInvalidRequest, err.Error()))
			return
		}
		write(w, h(r, raw))
	})
}

// codeCrossOrigin is the problem code of a cross-origin action.
const codeCrossOrigin = "cross_origin"

// approveBody is the body of POST /ui/api/requests/{id}/approve.
type approveBody struct {
	ValidForMinutes json.RawMessage `json:"valid_for_minutes"`
	Note            string          `json:"note"`
}

// denyBody is the body of POST /ui/api/requests/{id}/deny.
type denyBody struct {
	Note string `json:"note"`
}

func (p *approvalPage) handleApprove(r *http.Request, data []byte) reply {
	var body approveBody
	if err := json.Unmarshal(data, &body); err != nil {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, "the body is not valid: "+err.Error())
	}
	minutes, err := p.validForMinutes(body.ValidForMinutes)
	if err != nil {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, err.Error())
	}
	note, err := checkNote(body.Note, false)
	if err != nil {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, err.Error())
	}
	return p.decide(r.PathValue("id"), provider.StatusApproved, note, time.Duration(minutes)*time.Minute)
}

func (p *approvalPage) handleDeny(r *http.Request, data []byte) reply {
	var body denyBody
	if err := json.Unmarshal(data, &body); err != nil {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, "the body is not valid: "+err.Error())
	}
	note, err := checkNote(body.Note, true)
	if err != nil {
		return problem(http.StatusBadRequest, provider.CodeInvalidRequest, err.Error())
	}
	return p.decide(r.PathValue("id"), provider.StatusDenied, note, 0)
}

// validForMinutes reads valid_for_minutes: a whole number from 1 to maxMinutes.
func (p *approvalPage) validForMinutes(raw json.RawMessage) (int64, error) {
	bounds := fmt.Sprintf("a whole number of minutes from 1 to %d", p.maxMinutes())
	text := strings.TrimSpace(string(raw))
	if text == "" || text == "null" {
		return 0, fmt.Errorf("valid_for_minutes is required: give %s", bounds)
	}
	minutes, err := strconv.ParseInt(text, 10, 64)
	if err != nil || minutes < 1 || minutes > int64(p.maxMinutes()) {
		return 0, fmt.Errorf("valid_for_minutes must be %s, not %s", bounds, text)
	}
	return minutes, nil
}

// checkNote trims a note and checks its length; a denial needs one.
func checkNote(note string, required bool) (string, error) {
	note = strings.TrimSpace(note)
	if required && note == "" {
		return "", errors.New("note is required to deny: say why, the agent and the audit trail read it")
	}
	if n := len([]rune(note)); n > maxNoteLength {
		return "", fmt.Errorf("note has %d characters; shorten it to at most %d", n, maxNoteLength)
	}
	return note, nil
}

func (p *approvalPage) decide(id, status, note string, validFor time.Duration) reply {
	req, err := p.s.decide(id, status, note, nil, validFor)
	if errors.Is(err, ErrAlreadyDecided) {
		return alreadyDecided(req)
	}
	if err != nil {
		return p.s.failure(err)
	}
	p.s.log.Info("decided on the approval page", "id", req.ID, "status", req.Status)
	return success(http.StatusOK, req)
}
