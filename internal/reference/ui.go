package reference

import (
	"crypto/rand"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"toolgate.dev/toolgate/internal/provider"
)

// The approval page is the admin surface a person uses from a browser: GET /ui/ signs in (a form that
// posts to /ui/sign-in) and lists the pending
// requests and updates itself through Server-Sent Events (GET /ui/events); its buttons POST to
// /ui/api/requests/{id}/approve and /ui/api/requests/{id}/deny. Sign-in and the session cookie are in
// ui_session.go, the page and how it renders a request in ui_page.go, the snapshots and the event
// stream in ui_events.go, approve and deny in ui_actions.go, a request's preview (the tool's own claim
// of what the call would do) in ui_preview.go.

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
	created    broadcast // fired after every submission and every vote
}

// withApprovalPage serves the approval page under /ui/ and everything else with api. It tells the page's
// event streams about new requests (a submission is the only way to create one) and about votes
// through the admin API that leave a request pending. Decisions, cancellations (instance deletions
// included) and expiries reach the streams through the pending requests' change channels.
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
	mux.HandleFunc("POST /ui/sign-in", p.handleSignIn)
	mux.Handle("GET /ui/static/{name}", p.session(p.handleStatic))
	mux.HandleFunc("GET /ui/events", p.handleEvents)
	mux.Handle("POST /ui/api/requests/{id}/approve", p.action(p.handleApprove))
	mux.Handle("POST /ui/api/requests/{id}/deny", p.action(p.handleDeny))
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		write(w, fail(provider.CodeNotFound, "no such page: "+r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/") {
			mux.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
		if r.Method == http.MethodPost && (r.URL.Path == "/v1/requests" || isDecidePath(r.URL.Path)) {
			p.created.notify()
		}
	})
}

// isDecidePath reports whether path is the admin API's decision, POST /admin/v1/requests/{id}/decide:
// a vote that leaves the request pending reaches the streams only this way.
func isDecidePath(path string) bool {
	id, found := strings.CutSuffix(strings.TrimPrefix(path, "/admin/v1/requests/"), "/decide")
	return found && id != "" && !strings.Contains(id, "/") && strings.HasPrefix(path, "/admin/v1/requests/")
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
