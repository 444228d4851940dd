package mcpgateway

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/pkg/toolcall"
	"toolgate.dev/toolgate/test/testcert"
	"toolgate.dev/toolgate/test/testenv"
	th "toolgate.dev/toolgate/test/testharness"
)

const testAudience = "toolgate-mcp"

// newAuthWorld is a world whose gateway authenticates its HTTP callers with ServiceAccount tokens
// for testAudience, and runs as a user that holds nothing but the ClusterRoles of
// config/rbac/mcp_gateway_role.yaml, installed as shipped and bound as their comment says: the
// tests prove that they are all the gateway needs.
func newAuthWorld(t *testing.T) *world {
	t.Helper()
	return newAuthWorldWith(t, Options{WaitingLimit: 10 * time.Minute})
}

// newAuthWorldWith is newAuthWorld with the gateway's options o (its Auth is set here).
func newAuthWorldWith(t *testing.T, o Options) *world {
	t.Helper()
	if o.Auth == nil {
		o.Auth = &Auth{}
	}
	o.Auth.Audiences = []string{testAudience}
	return newWorldAs(t, o, func(h *th.Harness) *rest.Config {
		cfg := gatewayIdentity(h)
		if o.Auth.Config != nil {
			// The test's wrapping of the gateway's identity (o.Auth.Config.WrapTransport).
			cfg = rest.CopyConfig(cfg)
			cfg.WrapTransport = o.Auth.Config.WrapTransport
		}
		g := h.G
		// The test's namespace holds only callers: the gateway may act as each of its ServiceAccounts.
		// The impersonator's binding first: the authorizer sees RoleBindings in the order they were
		// written, so the wait below for the other covers both.
		for _, role := range []string{"mcp-gateway-impersonator", "mcp-gateway"} {
			g.Expect(h.K8s.Create(context.Background(), &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: role},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: gatewayUser}},
			})).To(Succeed())
		}
		c, err := client.New(cfg, client.Options{Scheme: toolcall.Scheme()})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func() error {
			return c.List(context.Background(), &tg.ToolList{}, client.InNamespace(h.NS))
		}).Should(Succeed(), "the gateway's role binding takes effect")
		return cfg
	})
}

const gatewayUser = "toolgate-test-mcp-gateway"

var gatewayOnce struct {
	sync.Once
	cfg *rest.Config
	err error
}

// gatewayIdentity installs the gateway's ClusterRoles as shipped, binds the authenticator role
// cluster-wide to gatewayUser, and returns that user's configuration (once per process).
func gatewayIdentity(h *th.Harness) *rest.Config {
	gatewayOnce.Do(func() {
		gatewayOnce.cfg, gatewayOnce.err = installGatewayIdentity()
	})
	h.G.Expect(gatewayOnce.err).NotTo(HaveOccurred())
	return gatewayOnce.cfg
}

func installGatewayIdentity() (*rest.Config, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "mcp_gateway_role.yaml"))
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	for _, doc := range strings.Split(string(data), "\n---\n") {
		role := &rbacv1.ClusterRole{}
		if err := yaml.UnmarshalStrict([]byte(doc), role); err != nil {
			return nil, fmt.Errorf("config/rbac/mcp_gateway_role.yaml: %w", err)
		}
		if err := env.Client.Create(ctx, role); err != nil {
			return nil, err
		}
	}
	if err := env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "mcp-gateway-authenticator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mcp-gateway-authenticator"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: gatewayUser}},
	}); err != nil {
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: gatewayUser})
	if err != nil {
		return nil, err
	}
	return user.Config(), nil
}

// serviceAccount creates a ServiceAccount in the world's namespace, grants it the given Roles'
// rules there, and returns a token for it issued by the apiserver (TokenRequest) for audience.
func (w *world) serviceAccount(name, audience string, rules ...rbacv1.PolicyRule) string {
	w.T.Helper()
	ctx := context.Background()
	g := w.G
	g.Expect(w.K8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name}})).To(Succeed())
	if len(rules) > 0 {
		g.Expect(w.K8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name}, Rules: rules})).To(Succeed())
		g.Expect(w.K8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: w.NS, Name: name}},
		})).To(Succeed())
	}
	return w.token(name, audience)
}

func (w *world) token(sa, audience string) string {
	w.T.Helper()
	kube, err := kubernetes.NewForConfig(env.Config)
	w.G.Expect(err).NotTo(HaveOccurred())
	tr, err := kube.CoreV1().ServiceAccounts(w.NS).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	w.G.Expect(err).NotTo(HaveOccurred())
	return tr.Status.Token
}

// mayCallRule grants RBAC verb call on the named tools; agentRule what an agent needs on ToolCalls.
func mayCallRule(tools ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{tg.GroupVersion.Group}, Resources: []string{"tools"}, Verbs: []string{VerbCall}, ResourceNames: tools}
}

var agentRule = rbacv1.PolicyRule{APIGroups: []string{tg.GroupVersion.Group}, Resources: []string{"toolcalls"}, Verbs: []string{"create", "get", "list", "watch", "delete"}}

// reSigned returns token with its exp, iat and nbf moved by shift, signed again with the envtest
// apiserver's ServiceAccount signing key: the same token, expired (or not) by the cluster's own
// signer.
func reSigned(g *WithT, token string, shift time.Duration) string {
	parts := strings.Split(token, ".")
	g.Expect(parts).To(HaveLen(3))
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	g.Expect(err).NotTo(HaveOccurred())
	claims := map[string]any{}
	g.Expect(json.Unmarshal(payload, &claims)).To(Succeed())
	for _, k := range []string{"exp", "iat", "nbf"} {
		if v, ok := claims[k].(float64); ok {
			claims[k] = int64(v) + int64(shift.Seconds())
		}
	}
	payload, err = json.Marshal(claims)
	g.Expect(err).NotTo(HaveOccurred())

	keyPEM, err := os.ReadFile(filepath.Join(env.Env.ControlPlane.APIServer.CertDir, "sa-signer.key"))
	g.Expect(err).NotTo(HaveOccurred())
	block, _ := pem.Decode(keyPEM)
	g.Expect(block).NotTo(BeNil())
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		if key, err = x509.ParseECPrivateKey(block.Bytes); err != nil {
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		}
	}
	g.Expect(err).NotTo(HaveOccurred())
	signed := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload)
	sum := sha256.Sum256([]byte(signed))
	var sig []byte
	switch k := key.(type) {
	case *rsa.PrivateKey: // RS256
		sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
		g.Expect(err).NotTo(HaveOccurred())
	case *ecdsa.PrivateKey: // ES256: r and s, 32 bytes each
		r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
		g.Expect(err).NotTo(HaveOccurred())
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	default:
		g.Expect(key).To(BeNil(), "an unexpected signing key type %T", key)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// initialize sends an MCP initialize request with the given bearer token ("" for none).
func (w *world) initialize(token string) *http.Response {
	w.T.Helper()
	return initializeWith(w.G, http.DefaultClient, w.url, token)
}

// initializeWith sends an MCP initialize request to url with c and the given bearer token ("" for
// none).
func initializeWith(g Gomega, c *http.Client, url, token string) *http.Response {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connectAs opens an MCP session with the Go SDK's client, sending token on every request.
func (w *world) connectAs(token string) *mcp.ClientSession {
	w.T.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: w.url, HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
	w.G.Expect(err).NotTo(HaveOccurred())
	w.T.Cleanup(func() { _ = cs.Close() })
	return cs
}

// Requests without a valid ServiceAccount token for the gateway's audience get 401 with the
// WWW-Authenticate challenge of the MCP authorization spec, naming the protected resource metadata,
// which is served without a token. A token for another audience, an expired token (signed by the
// cluster's own key) and no token are refused; a valid token is accepted.
func TestHTTPCallersAreAuthenticatedWithServiceAccountTokens(t *testing.T) {
	w := newAuthWorld(t)
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	valid := w.serviceAccount("agent", testAudience, mayCallRule("issue_refund"))
	wantChallenge := `Bearer resource_metadata="` + strings.Replace(w.url, "/mcp", "/.well-known/oauth-protected-resource/mcp", 1) + `"`

	for name, token := range map[string]string{
		"no token":         "",
		"another audience": w.token("agent", "someone-else"),
		"expired":          reSigned(g, valid, -2*time.Hour),
		"not a token":      "abc",
	} {
		resp := w.initialize(token)
		g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized), name)
		g.Expect(resp.Header.Values("WWW-Authenticate")).To(ConsistOf(wantChallenge), name)
	}
	g.Expect(w.initialize(valid).StatusCode).To(Equal(http.StatusOK), "a valid token")
	g.Expect(w.initialize(reSigned(g, valid, 0)).StatusCode).To(Equal(http.StatusOK),
		"the same token signed again by the test without changing its times is valid: only the expiry made the difference")

	resp, err := http.Get(strings.Replace(w.url, "/mcp", "/.well-known/oauth-protected-resource/mcp", 1))
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(body)).To(MatchJSON(`{"resource":"` + w.url + `","bearer_methods_supported":["header"],"resource_name":"Toolgate MCP gateway"}`))
}

// An authenticated caller sees only the Tools it may call (RBAC verb call on tools, resourceName
// the toolName), may call only those, and its ToolCalls are created as itself: a caller that may
// call the tool but not create ToolCalls is refused by the apiserver under its own name.
func TestCallersListAndCallOnlyTheirToolsAndActAsThemselves(t *testing.T) {
	w := newAuthWorld(t)
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	w.Tool("restart-pod", "restart_pod", "")
	w.Tool("lookup", "lookup_order", "")
	refunder := w.serviceAccount("refunder", testAudience, mayCallRule("issue_refund", "lookup_order"), agentRule)
	noCreate := w.serviceAccount("no-create", testAudience, mayCallRule("issue_refund"))
	nobody := w.serviceAccount("nobody", testAudience)

	names := func(token string) []string {
		res, err := w.connectAs(token).ListTools(context.Background(), nil)
		g.Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, t := range res.Tools {
			out = append(out, t.Name)
		}
		return out
	}
	g.Expect(names(refunder)).To(Equal([]string{"issue_refund", "lookup_order"}))
	g.Expect(names(noCreate)).To(Equal([]string{"issue_refund"}))
	// A caller that may call none of them opens no session at all.
	_, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: w.url, HTTPClient: &http.Client{Transport: bearer{nobody}}}, nil)
	g.Expect(err).To(MatchError(ContainSubstring("Forbidden")))

	// A call of a tool the caller may not call is refused before any ToolCall exists.
	cs := w.connectAs(refunder)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "restart_pod", Arguments: map[string]any{}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(text(res)).To(ContainSubstring(`system:serviceaccount:` + w.NS + `:refunder may not call it. An admin grants it with RBAC verb "call" on tools.toolgate.dev, resourceName "restart_pod"`))

	// The apiserver judges the ToolCall's creation as the caller.
	res, err = w.connectAs(noCreate).CallTool(context.Background(), &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(text(res)).To(ContainSubstring(`User "system:serviceaccount:` + w.NS + `:no-create" cannot create resource "toolcalls"`))
	list := &tg.ToolCallList{}
	g.Expect(w.K8s.List(context.Background(), list, client.InNamespace(w.NS))).To(Succeed())
	g.Expect(list.Items).To(BeEmpty())

	// A caller with both calls the tool as itself: admission records it as the requester, with the
	// uid of its ServiceAccount and the groups the apiserver gives it. Its call runs its course.
	done := w.call(context.Background(), cs, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	name := w.toolCallName()
	sa := &corev1.ServiceAccount{}
	g.Expect(w.K8s.Get(context.Background(), client.ObjectKey{Namespace: w.NS, Name: "refunder"}, sa)).To(Succeed())
	requester := w.Get(name).Spec.Requester
	g.Expect(requester).NotTo(BeNil())
	g.Expect(requester.Username).To(Equal("system:serviceaccount:" + w.NS + ":refunder"))
	g.Expect(requester.UID).To(Equal(string(sa.UID)))
	g.Expect(requester.Groups).To(ContainElements("system:serviceaccounts", "system:serviceaccounts:"+w.NS, "system:authenticated"))
	_, err = w.Provider.Decide(w.PendingRequest(name).ID, "denied", "not today", nil)
	g.Expect(err).NotTo(HaveOccurred())
	o := w.outcome(done)
	g.Expect(o.err).NotTo(HaveOccurred())
	g.Expect(text(o.res)).To(ContainSubstring("a human denied it"))
}

// A session belongs to its caller: another authenticated caller cannot end it (the SDK answers 403)
// and so cannot abandon its calls; its owner can.
func TestOnlyItsCallerEndsASession(t *testing.T) {
	w := newAuthWorld(t)
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	owner := w.serviceAccount("owner", testAudience, mayCallRule("issue_refund"), agentRule)
	other := w.serviceAccount("other", testAudience, mayCallRule("issue_refund"), agentRule)
	cs := w.connectAs(owner)
	done := w.call(context.Background(), cs, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	name := w.toolCallName()
	req := w.PendingRequest(name)

	end := func(token string) int {
		del, err := http.NewRequest(http.MethodDelete, w.url, nil)
		g.Expect(err).NotTo(HaveOccurred())
		del.Header.Set("Mcp-Session-Id", cs.ID())
		del.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(del)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.Body.Close()).To(Succeed())
		return resp.StatusCode
	}
	g.Expect(end(other)).To(Equal(http.StatusForbidden))
	g.Consistently(done).WithTimeout(time.Second).ShouldNot(Receive())
	g.Expect(w.Get(name).DeletionTimestamp).To(BeNil(), "another caller abandoned nothing")

	g.Expect(end(owner)).To(Equal(http.StatusNoContent))
	w.WaitGone(name, 30*time.Second)
	g.Eventually(func() (string, error) {
		r, err := w.Provider.Get(req.ID)
		return r.Status, err
	}).Should(Equal("cancelled"))
}

// The command authenticates its HTTP callers by default, for --token-audience, and names the
// metadata of --url (by default the --listen address) in its challenge; --unauthenticated does not.
func TestCommandAuthenticatesHTTPCallers(t *testing.T) {
	w, kubeconfig := commandWorld(t)
	h, g := w.Harness, w.G
	token := w.serviceAccount("agent", "payments-gateway", mayCallRule("issue_refund"), agentRule)

	serve := func(extra ...string) string {
		addr, err := th.FreeAddr()
		g.Expect(err).NotTo(HaveOccurred())
		startCommand(t, g, append([]string{"--listen", addr, "--namespace", h.NS, "--kubeconfig", kubeconfig}, extra...)...)
		w.url = "http://" + addr + "/mcp"
		g.Eventually(func() error {
			resp, err := http.Get("http://" + addr + "/.well-known/oauth-protected-resource/mcp")
			if err == nil {
				_ = resp.Body.Close()
			}
			return err
		}).WithTimeout(30 * time.Second).Should(Succeed())
		return addr
	}

	addr := serve("--token-audience", "payments-gateway")
	resp := w.initialize("")
	g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
	g.Expect(resp.Header.Get("WWW-Authenticate")).To(Equal(`Bearer resource_metadata="http://` + addr + `/.well-known/oauth-protected-resource/mcp"`))
	g.Expect(w.initialize(w.token("agent", testAudience)).StatusCode).To(Equal(http.StatusUnauthorized), "a token for the default audience")
	g.Expect(w.initialize(token).StatusCode).To(Equal(http.StatusOK))
	res, err := w.connectAs(token).ListTools(context.Background(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Tools).To(ConsistOf(HaveField("Name", "issue_refund")))

	serve("--unauthenticated", "--url", "https://gateway.example/mcp")
	g.Expect(w.initialize("").StatusCode).To(Equal(http.StatusOK))
}

// A session is opened only for a caller who may call some Tool of the namespace, and one caller holds
// at most MaxSessionsPerCaller at once; a token the apiserver refused is refused again for a while
// without another TokenReview. The official TypeScript SDK client sees the refusal at connect.
func TestGatewayLimitsWhoOpensSessions(t *testing.T) {
	var reviews atomic.Int64
	counting := &rest.Config{WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/tokenreviews") {
				reviews.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}}
	w := newAuthWorldWith(t, Options{WaitingLimit: 10 * time.Minute, Auth: &Auth{Config: counting, MaxSessionsPerCaller: 2}})
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	agent := w.serviceAccount("agent", testAudience, mayCallRule("issue_refund"), agentRule)
	idle := w.serviceAccount("idle", testAudience, agentRule) // may create ToolCalls, but call no Tool

	// No grant, no session: refused at initialize, by the TypeScript SDK client as by a plain POST.
	g.Expect(w.initialize(idle).StatusCode).To(Equal(http.StatusForbidden))
	ts := w.startTSAgent("issue_refund", th.RefundArgs, idle)
	g.Eventually(ts.lines).WithTimeout(30 * time.Second).Should(ContainElement(And(HavePrefix("error "), ContainSubstring("may call no Tool in namespace"))))

	// At most two sessions per caller; ending one makes room.
	first := w.initialize(agent)
	g.Expect(first.StatusCode).To(Equal(http.StatusOK))
	g.Expect(w.initialize(agent).StatusCode).To(Equal(http.StatusOK))
	g.Expect(w.initialize(agent).StatusCode).To(Equal(http.StatusTooManyRequests))
	end, err := http.NewRequest(http.MethodDelete, w.url, nil)
	g.Expect(err).NotTo(HaveOccurred())
	end.Header.Set("Authorization", "Bearer "+agent)
	end.Header.Set("Mcp-Session-Id", first.Header.Get("Mcp-Session-Id"))
	resp, err := http.DefaultClient.Do(end)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusNoContent))
	g.Expect(w.initialize(agent).StatusCode).To(Equal(http.StatusOK))

	// A refused token costs one TokenReview, however often it is sent within the TTL.
	bad := w.token("agent", "another-gateway")
	before := reviews.Load()
	for range 5 {
		g.Expect(w.initialize(bad).StatusCode).To(Equal(http.StatusUnauthorized))
	}
	g.Expect(reviews.Load() - before).To(BeEquivalentTo(1))
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Without --token-audience the command accepts only tokens issued for its own --url, so a token sent
// to one gateway is not accepted by another; with --tls-cert-file and --tls-key-file it serves HTTPS
// only, with that certificate.
func TestCommandHasAnAudienceOfItsOwnAndServesTLS(t *testing.T) {
	w, kubeconfig := commandWorld(t)
	h, g := w.Harness, w.G
	addr, err := th.FreeAddr()
	g.Expect(err).NotTo(HaveOccurred())
	ca := testcert.NewCA(t, "gateway CA")
	certFile, keyFile := testcert.WriteKeyPair(t, t.TempDir(), ca.ServerCert(t))
	self := "https://" + addr + "/mcp"
	startCommand(t, g, "--listen", addr, "--namespace", h.NS, "--kubeconfig", kubeconfig, "--tls-cert-file", certFile, "--tls-key-file", keyFile)
	httpsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	g.Eventually(func() error {
		resp, err := httpsClient.Get("https://" + addr + "/.well-known/oauth-protected-resource/mcp")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}).WithTimeout(30 * time.Second).Should(Succeed())
	// Plain HTTP gets only the TLS server's refusal.
	plain, err := http.Get("http://" + addr + "/.well-known/oauth-protected-resource/mcp")
	g.Expect(err).NotTo(HaveOccurred())
	_ = plain.Body.Close()
	g.Expect(plain.StatusCode).To(Equal(http.StatusBadRequest), "no plain HTTP beside HTTPS")

	initialize := func(token string) int { return initializeWith(g, httpsClient, self, token).StatusCode }
	own := w.serviceAccount("agent", self, mayCallRule("issue_refund"), agentRule)
	g.Expect(initialize(own)).To(Equal(http.StatusOK), "a token for the gateway's own URL")
	g.Expect(initialize(w.token("agent", testAudience))).To(Equal(http.StatusUnauthorized), "a token for the audience every gateway once shared")
}

// startCommand runs toolgate-mcp with args until the test ends, and logs its stderr if the test failed.
func startCommand(t *testing.T, g Gomega, args ...string) {
	t.Helper()
	var stderr strings.Builder
	cmd := exec.Command(th.Binary(t, "./cmd/toolgate-mcp"), args...)
	cmd.Stderr = &stderr
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("toolgate-mcp stderr:\n%s", stderr.String())
		}
	})
}

// commandWorld is a world with the refund Tool for tests that run the command, and a kubeconfig for
// it.
func commandWorld(t *testing.T) (*world, string) {
	h := th.New(t, env)
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	h.G.Expect(err).NotTo(HaveOccurred())
	return &world{Harness: h}, kubeconfig
}
