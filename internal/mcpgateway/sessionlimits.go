package mcpgateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// What an authenticated caller may open: a session only if it may call some Tool of the namespace,
// and at most MaxSessionsPerCaller at once. Without these, any token issued for the gateway's
// audience could open sessions without end, each holding memory until it times out.

// DefaultMaxSessionsPerCaller is Auth.MaxSessionsPerCaller's default.
const DefaultMaxSessionsPerCaller = 16

// DefaultInvalidTokenCacheTTL is how long a token the apiserver refused is refused again without
// another TokenReview (Auth.InvalidTokenCacheTTL's default).
const DefaultInvalidTokenCacheTTL = 10 * time.Second

// sessionOwners records which caller opened each session, to count each caller's sessions.
type sessionOwners struct {
	mu    sync.Mutex
	owner map[string]string // session id -> caller (TokenInfo.UserID)
}

// opened counts caller's sessions the server still holds, forgetting those it no longer does.
func (s *sessionOwners) opened(server *mcp.Server, caller string) int {
	live := map[string]bool{}
	for ss := range server.Sessions() {
		live[ss.ID()] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, owner := range s.owner {
		switch {
		case !live[id]:
			delete(s.owner, id)
		case owner == caller:
			n++
		}
	}
	return n
}

func (s *sessionOwners) add(id, caller string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owner == nil {
		s.owner = map[string]string{}
	}
	s.owner[id] = caller
}

// sessionWriter notes the session id the SDK gives a new session in its response header.
type sessionWriter struct {
	http.ResponseWriter
	id string
}

func (w *sessionWriter) WriteHeader(code int) {
	w.id = w.Header().Get("Mcp-Session-Id")
	w.ResponseWriter.WriteHeader(code)
}

func (w *sessionWriter) Write(b []byte) (int, error) {
	if w.id == "" {
		w.id = w.Header().Get("Mcp-Session-Id")
	}
	return w.ResponseWriter.Write(b)
}

func (w *sessionWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *sessionWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// admitSession answers a request that would open a session (a POST without Mcp-Session-Id) from an
// authenticated caller: false, with the refusal written, when the caller may call no Tool of the
// namespace (403) or already holds MaxSessionsPerCaller sessions (429).
func (g *Gateway) admitSession(w http.ResponseWriter, r *http.Request) bool {
	ti := auth.TokenInfoFromContext(r.Context())
	u, _ := ti.Extra[userKey].(authenticationv1.UserInfo)
	ok, err := g.mayCallAny(r.Context(), &u)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return false
	case !ok:
		http.Error(w, fmt.Sprintf("%s may call no Tool in namespace %s: a session is opened only for a caller with a grant of the verb %q on tools.toolgate.dev there", u.Username, g.namespace, VerbCall), http.StatusForbidden)
		return false
	}
	if n := g.sessions.opened(g.server, ti.UserID); n >= g.callers.MaxSessionsPerCaller {
		http.Error(w, fmt.Sprintf("%s holds %d sessions, the most one caller may hold: end one (HTTP DELETE) or let it time out", u.Username, n), http.StatusTooManyRequests)
		return false
	}
	return true
}

// mayCallAny reports whether the caller may call at least one Tool of the namespace.
func (g *Gateway) mayCallAny(ctx context.Context, u *authenticationv1.UserInfo) (bool, error) {
	tools, err := g.readTools(ctx)
	if err != nil {
		return false, err
	}
	for name := range g.toolDefinitions(tools) {
		ok, err := g.callers.mayCall(ctx, g.namespace, u, name)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// tokenKey is what the cache of refused tokens keeps of a token: its hash, never the token.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
