package mcpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/pkg/toolcall"
)

// Callers: over HTTP, with Options.Auth, every request carries a bearer token that the apiserver
// reviews (TokenReview); each tools/call creates its ToolCall as that caller (impersonation), so
// that admission authorizes the caller and records it as the requester; tools/list shows the Tools
// the caller may call (RBAC verb "call" on tools, resourceName the toolName).

// VerbCall is the RBAC verb on tools.toolgate.dev (resourceName: the toolName) that allows a caller
// to call a tool.
const VerbCall = "call"

// DefaultAccessCacheTTL is how long the gateway reuses the answer to "may this caller call this tool"
// when Auth.AccessCacheTTL is zero.
const DefaultAccessCacheTTL = 10 * time.Second

// Auth authenticates the callers of the streamable HTTP endpoint with Kubernetes tokens.
type Auth struct {
	// Config is the gateway's own identity. It reviews the callers' tokens (create tokenreviews),
	// asks whether they may call each Tool (create localsubjectaccessreviews in the namespace), and
	// impersonates them to create their ToolCalls.
	Config *rest.Config
	// Audiences are those of the tokens the gateway accepts (TokenReview spec.audiences): a token
	// issued for another audience is refused. Required.
	Audiences []string
	// ResourceURL is the gateway's MCP endpoint as its clients reach it, e.g.
	// https://toolgate-mcp.payments.svc:8090/mcp: the resource of its OAuth protected resource
	// metadata (RFC 9728), served at /.well-known/oauth-protected-resource followed by its path, and
	// named by the WWW-Authenticate header of every 401.
	ResourceURL string
	// AccessCacheTTL is how long an answer to "may this caller call this tool" is reused. Default
	// DefaultAccessCacheTTL.
	AccessCacheTTL time.Duration
	// MaxSessionsPerCaller bounds the sessions one caller holds at once; a new one beyond it is
	// refused (429). Default DefaultMaxSessionsPerCaller.
	MaxSessionsPerCaller int
	// InvalidTokenCacheTTL is how long a token the apiserver refused is refused again without asking
	// it (a flood of bad tokens costs one TokenReview each per TTL). Default
	// DefaultInvalidTokenCacheTTL.
	InvalidTokenCacheTTL time.Duration
}

// callers holds what authenticating callers needs.
type callers struct {
	Auth
	kube     kubernetes.Interface
	metaURL  string
	access   *utilcache.LRUExpireCache // access key -> bool
	refused  *utilcache.LRUExpireCache // tokenKey -> error of a token the apiserver refused
	clients  *utilcache.LRUExpireCache // user key -> *toolcall.Client
	metadata *oauthex.ProtectedResourceMetadata
}

// serviceAccountPrefix starts the user name of every ServiceAccount.
const serviceAccountPrefix = "system:serviceaccount:"

// userKey is in TokenInfo.Extra: the caller's authenticationv1.UserInfo.
const userKey = "toolgate.dev/user"

func newCallers(a *Auth) (*callers, error) {
	if a.Config == nil {
		return nil, errors.New("mcpgateway: Auth.Config is nil: pass the gateway's rest.Config")
	}
	if len(a.Audiences) == 0 || slices.Contains(a.Audiences, "") {
		return nil, errors.New("mcpgateway: Auth.Audiences is empty: pass the audience the callers' tokens are issued for, e.g. toolgate-mcp")
	}
	u, err := url.Parse(a.ResourceURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("mcpgateway: Auth.ResourceURL %q is not an absolute URL: pass the endpoint as clients reach it, e.g. https://toolgate-mcp.payments.svc:8090/mcp", a.ResourceURL)
	}
	kube, err := kubernetes.NewForConfig(a.Config)
	if err != nil {
		return nil, fmt.Errorf("mcpgateway: building the Kubernetes client for authentication: %w", err)
	}
	if a.AccessCacheTTL <= 0 {
		a.AccessCacheTTL = DefaultAccessCacheTTL
	}
	if a.MaxSessionsPerCaller <= 0 {
		a.MaxSessionsPerCaller = DefaultMaxSessionsPerCaller
	}
	if a.InvalidTokenCacheTTL <= 0 {
		a.InvalidTokenCacheTTL = DefaultInvalidTokenCacheTTL
	}
	meta := *u
	meta.Path = "/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.Path, "/")
	meta.RawQuery, meta.Fragment = "", ""
	return &callers{
		Auth:    *a,
		kube:    kube,
		metaURL: meta.String(),
		access:  utilcache.NewLRUExpireCache(4096),
		refused: utilcache.NewLRUExpireCache(4096),
		clients: utilcache.NewLRUExpireCache(256),
		metadata: &oauthex.ProtectedResourceMetadata{
			Resource:               a.ResourceURL,
			BearerMethodsSupported: []string{"header"},
			ResourceName:           "Toolgate MCP gateway",
		},
	}, nil
}

// handler wraps the MCP handler: requests without a valid token get 401 with a WWW-Authenticate
// header naming the protected resource metadata (the MCP authorization spec), which is served
// without authentication.
func (cs *callers) handler(next http.Handler) http.Handler {
	protected := auth.RequireBearerToken(cs.verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: cs.metaURL,
		// TokenReview checks expiry itself, at every request.
		AllowMissingExpiration: true,
	})(next)
	metadata := auth.ProtectedResourceMetadataHandler(cs.metadata)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/.well-known/oauth-protected-resource") {
			metadata.ServeHTTP(w, r)
			return
		}
		protected.ServeHTTP(w, r)
	})
}

// verify reviews a bearer token with the apiserver; a token it refused is refused again for
// InvalidTokenCacheTTL without asking.
func (cs *callers) verify(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	key := tokenKey(token)
	if v, ok := cs.refused.Get(key); ok {
		return nil, v.(error)
	}
	ti, err := cs.review(ctx, token)
	if errors.Is(err, auth.ErrInvalidToken) {
		cs.refused.Add(key, err, cs.InvalidTokenCacheTTL)
	}
	return ti, err
}

// review asks the apiserver who token's bearer is (TokenReview).
func (cs *callers) review(ctx context.Context, token string) (*auth.TokenInfo, error) {
	tr, err := cs.kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: cs.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("reviewing the bearer token (the gateway's identity needs create on tokenreviews.authentication.k8s.io): %w", err)
	}
	if !tr.Status.Authenticated {
		msg := tr.Status.Error
		if msg == "" {
			msg = "the token is not valid"
		}
		return nil, fmt.Errorf("%w: %s (send a ServiceAccount token issued for audience %s)", auth.ErrInvalidToken, msg, strings.Join(cs.Audiences, ", "))
	}
	if len(tr.Status.Audiences) > 0 && !slices.ContainsFunc(tr.Status.Audiences, func(a string) bool { return slices.Contains(cs.Audiences, a) }) {
		return nil, fmt.Errorf("%w: the token is for audience %s, not %s", auth.ErrInvalidToken, strings.Join(tr.Status.Audiences, ", "), strings.Join(cs.Audiences, ", "))
	}
	id := tr.Status.User.UID
	if id == "" {
		id = tr.Status.User.Username
	}
	// UserID binds the MCP session to this caller: the SDK refuses the session to anyone else.
	return &auth.TokenInfo{UserID: id, Extra: map[string]any{userKey: tr.Status.User}}, nil
}

// caller returns the authenticated caller of a request, or nil when callers are not authenticated.
func caller(extra *mcp.RequestExtra) *authenticationv1.UserInfo {
	if extra == nil || extra.TokenInfo == nil {
		return nil
	}
	if u, ok := extra.TokenInfo.Extra[userKey].(authenticationv1.UserInfo); ok {
		return &u
	}
	return nil
}

func userCacheKey(u *authenticationv1.UserInfo) string {
	b, _ := json.Marshal(u) // map keys are sorted: the same user is the same key
	return string(b)
}

// mayCall reports whether the caller may call the tool: RBAC verb "call" on tools.toolgate.dev with
// the toolName as resourceName, in the gateway's namespace. Answers are reused for AccessCacheTTL.
func (cs *callers) mayCall(ctx context.Context, namespace string, u *authenticationv1.UserInfo, tool string) (bool, error) {
	key := userCacheKey(u) + "\x00" + tool
	if v, ok := cs.access.Get(key); ok {
		return v.(bool), nil
	}
	extra := make(map[string]authorizationv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := cs.kube.AuthorizationV1().LocalSubjectAccessReviews(namespace).Create(ctx, &authorizationv1.LocalSubjectAccessReview{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace},
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: VerbCall, Group: tg.GroupVersion.Group, Resource: "tools", Name: tool,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("asking whether %s may call %s (the gateway's identity needs create on localsubjectaccessreviews.authorization.k8s.io in namespace %s): %w", u.Username, tool, namespace, err)
	}
	cs.access.Add(key, sar.Status.Allowed, cs.AccessCacheTTL)
	return sar.Status.Allowed, nil
}

// mayActAs reports whether the gateway's own identity may impersonate the caller, a ServiceAccount:
// the gateway acts only as the callers an admin allows it (a Role of the callers by name,
// config/rbac/mcp_gateway_role.yaml; mcpGateway.callers in the chart). It asks with a
// SelfSubjectAccessReview, which every authenticated identity may create; answers are reused for
// AccessCacheTTL. A caller that is no ServiceAccount is left to the apiserver (true).
func (cs *callers) mayActAs(ctx context.Context, u *authenticationv1.UserInfo) (bool, error) {
	ns, name, ok := strings.Cut(strings.TrimPrefix(u.Username, serviceAccountPrefix), ":")
	if !strings.HasPrefix(u.Username, serviceAccountPrefix) || !ok {
		return true, nil
	}
	key := "impersonate\x00" + u.Username
	if v, ok := cs.access.Get(key); ok {
		return v.(bool), nil
	}
	sar, err := cs.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "impersonate", Resource: "serviceaccounts", Name: name,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("asking whether the gateway may act as %s: %w", u.Username, err)
	}
	cs.access.Add(key, sar.Status.Allowed, cs.AccessCacheTTL)
	return sar.Status.Allowed, nil
}

// callsAs returns a toolcall client that acts as the caller (impersonation).
func (cs *callers) callsAs(namespace string, u *authenticationv1.UserInfo) (*toolcall.Client, error) {
	key := userCacheKey(u)
	if v, ok := cs.clients.Get(key); ok {
		return v.(*toolcall.Client), nil
	}
	cfg := rest.CopyConfig(cs.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: u.Username, UID: u.UID, Groups: u.Groups}
	if strings.HasPrefix(u.Username, serviceAccountPrefix) {
		// The apiserver gives an impersonated ServiceAccount its groups itself (the same ones a
		// ServiceAccount token has); sending them would need impersonate on groups as well.
		cfg.Impersonate.Groups = nil
	}
	if len(u.Extra) > 0 {
		cfg.Impersonate.Extra = make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			cfg.Impersonate.Extra[k] = v
		}
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: toolcall.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("building the client that acts as %s: %w", u.Username, err)
	}
	calls := toolcall.New(c, namespace)
	cs.clients.Add(key, calls, 10*time.Minute)
	return calls, nil
}
