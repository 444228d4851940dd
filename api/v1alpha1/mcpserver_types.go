package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KindMCPServer is the kind of an MCP server object, the owner of the Tools it generates.
const KindMCPServer = "MCPServer"

// LabelMCPServer on a Secret in an MCPServer's namespace names the MCPServer it serves: only such a
// Secret may give an MCPServer a request header or a CA bundle (consent, as for provider objects).
// On a Tool, it names the MCPServer that generated it.
const LabelMCPServer = "toolgate.dev/mcp-server"

// DefaultMCPRefreshInterval is how often an MCPServer's tools are listed again when
// spec.refreshInterval is not set.
const DefaultMCPRefreshInterval = "5m"

// The executor container's resources when spec.executor.resources is not set: mcp-call makes one
// HTTP call and reads at most 1 MiB of each answer, so that a namespace whose ResourceQuota asks
// every Pod for requests and limits accepts the calls' Pods without a LimitRange.
const (
	DefaultExecutorCPURequest    = "10m"
	DefaultExecutorMemoryRequest = "32Mi"
	DefaultExecutorCPULimit      = "500m"
	DefaultExecutorMemoryLimit   = "128Mi"
)

// MCPServerSpec is a streamable HTTP MCP server whose tools become Tools of this namespace, and what
// those Tools carry. Whoever may write MCPServers decides which tools agents may ask to run, the
// image that runs them and where its Pods run, as whoever may write Tools does.
// +kubebuilder:validation:XValidation:rule="self.url.startsWith('https://') || (self.url.startsWith('http://') && has(self.allowInsecureHTTP) && self.allowInsecureHTTP)",message="spec.url must be an https:// URL; an http:// URL is accepted only with spec.allowInsecureHTTP: true, for a development server"
// +kubebuilder:validation:XValidation:rule="!(has(self.caBundle) && has(self.caBundleRef))",message="set at most one of spec.caBundle or spec.caBundleRef"
// +kubebuilder:validation:XValidation:rule="!(has(self.executorImage) && has(self.executor) && has(self.executor.image))",message="set the image in spec.executor.image only: spec.executorImage is deprecated, remove it"
type MCPServerSpec struct {
	// url is the server's streamable HTTP endpoint, such as https://mcp.example.com/mcp. It must be
	// https:// unless allowInsecureHTTP is true.
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/?#@]+(/[^#]*)?$')",message="spec.url must be an absolute http(s) URL without user information or fragment, such as https://mcp.example.com/mcp"
	// +required
	URL string `json:"url"`

	// allowInsecureHTTP accepts an http:// url. Arguments, results and the request headers then cross
	// the network in the clear: only for a development server inside the cluster.
	// +optional
	AllowInsecureHTTP bool `json:"allowInsecureHTTP,omitempty"`

	// caBundle is a PEM bundle of the CAs to trust for the server instead of the system pool.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`

	// caBundleRef is a ConfigMap key, or the key of a Secret labelled toolgate.dev/mcp-server with this
	// object's name, holding that PEM bundle instead of caBundle, in this namespace.
	// +optional
	CABundleRef *CABundleRef `json:"caBundleRef,omitempty"`

	// headers are request headers sent to the server on every request (discovery and calls), such as
	// Authorization. Each value is read from a Secret of this namespace that consents to serve this
	// object: it carries the label toolgate.dev/mcp-server with this object's name. The calls' Jobs
	// read it from the Secret (secretKeyRef): the value is never copied into a Tool.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Headers []MCPHeader `json:"headers,omitempty"`

	// tools are the names of the server's tools to expose as Tools, or globs over them ("*" any run
	// of characters, "?" one character, "[...]" a class, as Go's path.Match). Empty (the default):
	// none, so that a platform team opts in to each tool; ["*"] exposes every tool.
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +optional
	Tools []string `json:"tools,omitempty"`

	// toolTemplate is what every Tool generated from this server carries besides its name, schema,
	// description and annotations.
	// +optional
	ToolTemplate MCPToolTemplate `json:"toolTemplate,omitempty"`

	// executor is how the Jobs of the generated Tools' calls run: the image of Toolgate's MCP
	// executor (mcp-call), its container's resources, and where its Pods are scheduled. Only this
	// object's author sets it: nothing the server sends reaches it.
	// +optional
	Executor MCPExecutor `json:"executor,omitempty"`

	// executorImage is deprecated: use executor.image, which it means when that is not set (setting
	// both is refused). The image of Toolgate's MCP executor (mcp-call) that each approved call's Job
	// runs.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	ExecutorImage string `json:"executorImage,omitempty"`

	// previews make one tool of the server the preview of another: before a human is asked about a
	// call of tool, previewTool is called with the same arguments, and its answer (the server's own
	// claim of what the call would do) goes into the approval request and the approval rules, as a
	// Tool's spec.preview. The preview tool runs before any approval, for every call that reaches
	// that point: name a tool that only reads. It need not be exposed by spec.tools. Its Job is the
	// tool's (the same executor, URL, CA bundle and headers): the header Secrets stay in it
	// (allowSecrets) since they are the credentials to reach the server at all, and the preview tool
	// receives nothing else but the call's arguments. Fail closed: a tool whose previewTool the server
	// does not list gets no Tool (its status.tools entry says why), since its calls must not run
	// without the preview asked for. A change of an entry changes the tool's Tool, which withdraws
	// the calls waiting on it.
	// +listType=map
	// +listMapKey=tool
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Previews []MCPToolPreview `json:"previews,omitempty"`

	// refreshInterval is how often the server's tools are listed again; a tool whose schema changed
	// changes its Tool, and one that disappeared deletes it. The tools are also listed again as soon
	// as the server sends notifications/tools/list_changed on the session the manager keeps open.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s')",message="spec.refreshInterval must be a duration of at least 1s such as 30s or 5m"
	// +kubebuilder:default="5m"
	// +optional
	RefreshInterval *metav1.Duration `json:"refreshInterval,omitempty"`
}

// MCPToolPreview names the server's tool that previews the calls of another of its tools.
// +kubebuilder:validation:XValidation:rule="self.tool != self.previewTool",message="spec.previews[]: previewTool must name another tool than tool: a tool cannot be its own preview, which runs before the approval"
type MCPToolPreview struct {
	// tool is the name (not a glob) of the server's tool whose calls get a preview; spec.tools must
	// expose it for it to have a Tool at all. An entry whose tool the server does not list, or
	// spec.tools does not expose, previews nothing, and the Ready condition's message says so.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +required
	Tool string `json:"tool"`

	// previewTool is the name of the server's tool called, with the same arguments, to say what a
	// call of tool would do, without doing it. Its answer (structuredContent as JSON, else its text)
	// is the preview, cut to 4000 bytes with a marker saying so.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +required
	PreviewTool string `json:"previewTool"`

	// timeout is the generated Tool's spec.preview.timeout: how long the preview may take, 1s to 10m.
	// Not set: 1m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('10m')",message="spec.previews[].timeout must be a duration from 1s to 10m such as 30s or 2m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// onFailure is the generated Tool's spec.preview.onFailure: Deny (when not set) ends a call whose
	// preview failed, timed out or said too much Rejected without asking anyone; Ask puts it to a
	// human with the preview's error in its place.
	// +optional
	OnFailure PreviewFailureAction `json:"onFailure,omitempty"`
}

// MCPExecutor is how the Pods of the generated Tools' Jobs run: what a careful author of a Job would
// set for a small HTTP client, and nothing that changes what it runs or what it may reach.
type MCPExecutor struct {
	// image is the image of Toolgate's MCP executor (mcp-call) that each approved call's Job runs: it
	// calls the one tool once with the approved arguments and writes the tool's result. Default: the
	// manager's --mcp-executor-image (the chart sets it to the mcp-call image of its release). A
	// change of the image, the default's included, changes every generated Tool that runs it, which
	// withdraws the calls waiting on them.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Image string `json:"image,omitempty"`

	// resources are the requests and limits of the executor container. Not set: requests cpu 10m and
	// memory 32Mi, limits cpu 500m and memory 128Mi, which a namespace's ResourceQuota accepts
	// without a LimitRange. Set, they replace those defaults whole ({} sets none, leaving them to the
	// namespace's LimitRange).
	// +optional
	Resources *MCPExecutorResources `json:"resources,omitempty"`

	// imagePullSecrets are Secrets of this namespace for pulling the image, as a Pod's.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// nodeSelector is the Pods' nodeSelector.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations are the Pods' tolerations.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// affinity is the Pods' affinity.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// priorityClassName is the Pods' PriorityClass.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// MCPExecutorResources are the requests and limits of the executor container: cpu, memory and
// ephemeral-storage.
// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits) || quantity(string(self.requests[k])).compareTo(quantity(string(self.limits[k]))) <= 0)",message="spec.executor.resources: each request must be at most its limit (requests.memory <= limits.memory, requests.cpu <= limits.cpu): lower the request or raise the limit"
type MCPExecutorResources struct {
	// requests are the resources the scheduler reserves for the container.
	// +kubebuilder:validation:MaxProperties=3
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'])",message="spec.executor.resources.requests names cpu, memory or ephemeral-storage only"
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`
	// limits are the most the container may use.
	// +kubebuilder:validation:MaxProperties=3
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'])",message="spec.executor.resources.limits names cpu, memory or ephemeral-storage only"
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`
}

// MCPHeader is one request header whose value a consenting Secret holds.
type MCPHeader struct {
	// name is the header's name, such as Authorization. The headers the MCP transport sets itself
	// (Content-Type, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID, Host,
	// Content-Length) cannot be set.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9!#$%&\\'*+.^_`|~-]+$')",message="spec.headers[].name must be an HTTP header name (letters, digits and !#$%&'*+.^_`|~-), such as Authorization"
	// +kubebuilder:validation:XValidation:rule="!(self.lowerAscii() in ['content-type', 'accept', 'mcp-session-id', 'mcp-protocol-version', 'last-event-id', 'host', 'content-length', 'transfer-encoding', 'connection'])",message="spec.headers[].name names a header the MCP transport sets itself; use another header"
	// +required
	Name string `json:"name"`
	// secretKeyRef is the key of a Secret in this namespace, labelled toolgate.dev/mcp-server with
	// this object's name, holding the header's value.
	// +required
	SecretKeyRef SecretKeyRef `json:"secretKeyRef"`
}

// MCPToolTemplate is what the Tools generated from an MCPServer carry.
type MCPToolTemplate struct {
	// executionTimeout is each generated Tool's spec.executionTimeout.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="spec.toolTemplate.executionTimeout must be a positive duration such as 90s, 5m or 1h30m"
	// +kubebuilder:default="5m"
	// +optional
	ExecutionTimeout *metav1.Duration `json:"executionTimeout,omitempty"`

	// approval is each generated Tool's spec.approval (its rules see the call's arguments and
	// requester). Without it a human decides every call. A rule whose action is Approve reaches only
	// the Tools of tools spec.tools names exactly: a tool exposed only by a glob (one the server adds
	// later, say) keeps the Deny and Require rules, and its status.tools entry names the rules left
	// out.
	// +optional
	Approval *ApprovalPolicy `json:"approval,omitempty"`

	// providerRef is each generated Tool's spec.providerRef.
	// +optional
	ProviderRef *ProviderRef `json:"providerRef,omitempty"`

	// finishedCallTTL is each generated Tool's spec.finishedCallTTL.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && (duration(self) == duration('0s') || duration(self) >= duration('1m'))",message="spec.toolTemplate.finishedCallTTL must be 0s (keep finished calls forever) or a duration of at least 1m such as 24h or 720h"
	// +optional
	FinishedCallTTL *metav1.Duration `json:"finishedCallTTL,omitempty"`
}

// MCPDiscoveredTool is one tool of the server that spec.tools exposes.
type MCPDiscoveredTool struct {
	// name is the tool's name at the server.
	Name string `json:"name"`
	// toolName is the generated Tool's spec.toolName: <MCPServer name>__<name>. Empty when the tool
	// has no Tool (message says why).
	// +optional
	ToolName string `json:"toolName,omitempty"`
	// tool is the generated Tool's metadata.name.
	// +optional
	Tool string `json:"tool,omitempty"`
	// schemaHash is the first 16 hex digits of the SHA-256 of the tool's inputSchema (as canonical
	// JSON, keys sorted): a change of it changes the Tool, which withdraws the calls waiting on it.
	// +optional
	SchemaHash string `json:"schemaHash,omitempty"`
	// message says why the tool has no Tool, when it has none.
	// +optional
	Message string `json:"message,omitempty"`
}

// MCPServerStatus is what the manager last found out about the server.
type MCPServerStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready is True when the server's tools were listed with this generation's settings
	// and every exposed tool has its Tool. kstatus's Reconciling is True while the manager retries a
	// server it could not list, and Stalled on a settings error only a change fixes (a missing header
	// Secret, an invalid CA bundle, a Tool name taken by a Tool this object does not own).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// tools are the server's tools that spec.tools exposes, as last listed, sorted by name.
	// +listType=map
	// +listMapKey=name
	// +optional
	Tools []MCPDiscoveredTool `json:"tools,omitempty"`
}

// MCPServer is a streamable HTTP MCP server whose tools (those spec.tools exposes) the manager turns
// into Tools of this namespace: an agent's call to one is put to a human like any other, and an
// approved call runs once, as a Job that calls that tool with exactly the approved arguments.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mcps,categories=toolgate
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="an MCPServer's name is at most 63 characters: it begins the toolName of every Tool it generates (<name>__<tool>)"
type MCPServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MCPServerSpec `json:"spec"`
	// An object the manager has not checked yet reads with status.observedGeneration 0, older than
	// its generation: kstatus reports it InProgress from its creation, not Current.
	// +kubebuilder:default={observedGeneration: 0}
	// +optional
	Status MCPServerStatus `json:"status,omitempty"`
}

// MCPServerList is a list of MCPServers.
// +kubebuilder:object:root=true
type MCPServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MCPServer `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MCPServer{}, &MCPServerList{})
}
