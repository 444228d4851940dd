package v1alpha1

import (
	batchv1 "k8s.io/api/batch/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultExecutionTimeout is the Tool's execution timeout when spec.executionTimeout is not set.
const DefaultExecutionTimeout = "5m"

// ToolSpec describes how a tool is executed once a human approved a call to it.
type ToolSpec struct {
	// toolName is the name agents and approvers see, e.g. issue_refund. At most one Tool per namespace
	// may carry a given toolName.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.-]*$`
	// +required
	ToolName string `json:"toolName"`

	// jobTemplate is the Job that executes the tool. The controller adds the env TOOL_NAME,
	// TOOL_ARGUMENTS (JSON), TOOLCALL_NAME and TOOLCALL_UID to every container, and sets
	// spec.backoffLimit to 0 when it is not set (not a Job's own default, 6): a tool whose Pod
	// failed is not run again unless the template asks for retries. It carries the full
	// Job schema, so the apiserver refuses a malformed template when the Tool is written. The CRD
	// leaves out the descriptions of the Pod template's fields (spec.template), which would make it
	// too large for client-side apply; `kubectl explain pod.spec` describes them.
	// +required
	JobTemplate batchv1.JobTemplateSpec `json:"jobTemplate"`

	// executionTimeout bounds how long the tool may run; it becomes the Job's activeDeadlineSeconds
	// (further capped by what is left of the caller's waiting limit).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="executionTimeout must be a positive duration such as 90s, 5m or 1h30m"
	// +kubebuilder:default="5m"
	// +optional
	ExecutionTimeout *metav1.Duration `json:"executionTimeout,omitempty"`

	// argumentsSchema is a JSON Schema (draft 2020-12 unless $schema says otherwise) that a ToolCall's
	// arguments must satisfy before any human is asked.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	ArgumentsSchema *apiextensionsv1.JSON `json:"argumentsSchema,omitempty"`

	// approval decides, before any human is asked, whether a call is denied, approved by policy or
	// put to a human. Without it (or when no rule matches) a human decides every call.
	// +optional
	Approval *ApprovalPolicy `json:"approval,omitempty"`

	// providerRef is the approvals provider this Tool's calls ask: an ApprovalProvider in this namespace
	// or a ClusterApprovalProvider. Without it, the namespace's ApprovalProvider named "default", else
	// the ClusterApprovalProvider named "default", else the manager's own provider flags. A call keeps
	// the provider it was accepted with, whatever later happens to the Tool.
	// +optional
	ProviderRef *ProviderRef `json:"providerRef,omitempty"`

	// finishedCallTTL is how long a finished ToolCall of this tool is kept, counted from when it
	// entered its final phase (its Ready condition's lastTransitionTime); the manager then deletes it,
	// and its Job with it. 0s keeps them forever; otherwise at least 1m, so that a caller waiting for
	// the outcome reads it first. Without it, the manager's --finished-toolcall-ttl applies. A ToolCall
	// labelled toolgate.dev/keep: "true" is kept forever whatever this says; a call that has not
	// finished is never deleted.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && (duration(self) == duration('0s') || duration(self) >= duration('1m'))",message="finishedCallTTL must be 0s (keep finished calls forever) or a duration of at least 1m such as 24h or 720h"
	// +optional
	FinishedCallTTL *metav1.Duration `json:"finishedCallTTL,omitempty"`

	// preview, when set, runs a preview Job before any human is asked: the tool says what this call
	// would do, without doing it. Its output goes into the approval request (the approver sees it,
	// labelled as the tool's own claim), the approval rules read it as `preview`, and the execution
	// Job receives its digest (TOOLGATE_PREVIEW_DIGEST) so that the tool can refuse to act when the
	// world changed since. docs/previews.md is the contract of a preview Job.
	// +optional
	Preview *ToolPreview `json:"preview,omitempty"`

	// mcpAnnotations are the MCP tool annotations the MCP gateway advertises for this tool. They are
	// hints for clients and agents; they never change whether a call needs approval.
	// +optional
	MCPAnnotations *MCPToolAnnotations `json:"mcpAnnotations,omitempty"`
}

// PreviewFailureAction is what happens to a call whose preview failed, timed out or said too much.
// +kubebuilder:validation:Enum=Deny;Ask
type PreviewFailureAction string

const (
	// PreviewFailureDeny ends the call Rejected (PreviewFailed) without asking anyone.
	PreviewFailureDeny PreviewFailureAction = "Deny"
	// PreviewFailureAsk asks the human anyway, with the preview's error in place of its output.
	PreviewFailureAsk PreviewFailureAction = "Ask"
)

// Limits and defaults of a preview.
const (
	// MaxPreviewBytes is the largest preview output a Tool may allow: the kubelet keeps at most 4096
	// bytes of a termination message, and cuts what is longer without saying so, so an output of
	// more than this could not be told from a cut one.
	MaxPreviewBytes = 4000
	// DefaultPreviewTimeout is spec.preview.timeout when it is not set.
	DefaultPreviewTimeout = "1m"
	// MaxPreviewTimeout is the longest spec.preview.timeout.
	MaxPreviewTimeout = "10m"
	// PreviewModeEnv is the env variable that tells a tool's container which run it is: "preview"
	// in the preview Job, "execute" in the execution Job of a Tool that has a preview.
	PreviewModeEnv = "TOOLGATE_MODE"
	// PreviewDigestEnv carries, in the execution Job, the digest of the preview the approver saw
	// (sha256:<hex> of its output; empty when the preview failed and the Tool asked anyway).
	PreviewDigestEnv = "TOOLGATE_PREVIEW_DIGEST"
	// PreviewMaxBytesEnv carries, in the preview Job, spec.preview.maxBytes.
	PreviewMaxBytesEnv = "TOOLGATE_PREVIEW_MAX_BYTES"
)

// ToolPreview is the Job that says what a call would do before a human is asked.
type ToolPreview struct {
	// jobTemplate is the preview's Job (a batch/v1 JobTemplateSpec, as spec.jobTemplate). Without it,
	// spec.jobTemplate runs in preview mode. Either way the controller adds the call's env (as for
	// the execution Job), TOOLGATE_MODE=preview and TOOLGATE_PREVIEW_MAX_BYTES, sets backoffLimit 0
	// and activeDeadlineSeconds from timeout, and, unless allowSecrets is true, removes every
	// reference to a Secret (env, envFrom and volumes). The preview's output is the termination
	// message of its Job's first container. A template that does not decode makes the Tool not Ready
	// (InvalidPreview); one the apiserver refuses ends the call Rejected (InvalidTool).
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	JobTemplate *apiextensionsv1.JSON `json:"jobTemplate,omitempty"`

	// timeout bounds the preview: its Job's activeDeadlineSeconds, and how long the manager waits
	// for its output. It comes out of the caller's waiting limit. At most 10m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('10m')",message="preview.timeout must be a duration from 1s to 10m such as 30s or 2m"
	// +kubebuilder:default="1m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// maxBytes is the largest output the preview may give, 1 to 4000 bytes. A longer output is a
	// failure of the preview (onFailure decides), never cut.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4000
	// +kubebuilder:default=4000
	// +optional
	MaxBytes int32 `json:"maxBytes,omitempty"`

	// onFailure is what happens when the preview fails, times out or gives more than maxBytes: Deny
	// (the default) ends the call Rejected without asking anyone; Ask puts the call to a human with
	// the preview's error shown in its place.
	// +kubebuilder:default=Deny
	// +optional
	OnFailure PreviewFailureAction `json:"onFailure,omitempty"`

	// allowSecrets lets the preview Job keep the Secrets its template references. Without it they
	// are removed: a preview that only reads what it is given cannot act with the tool's credentials.
	// +optional
	AllowSecrets bool `json:"allowSecrets,omitempty"`
}

// ApprovalAction is what a matching approval rule does with a call.
// +kubebuilder:validation:Enum=Deny;Approve;Require
type ApprovalAction string

const (
	// ActionDeny ends the call Rejected without asking anyone.
	ActionDeny ApprovalAction = "Deny"
	// ActionApprove approves the call without asking a human; the rule is recorded as the decision's source.
	ActionApprove ApprovalAction = "Approve"
	// ActionRequire puts the call to a human through the approvals provider.
	ActionRequire ApprovalAction = "Require"
)

// MaxApprovalRules is the largest number of rules one Tool may carry.
const MaxApprovalRules = 32

// ApprovalPolicy is an ordered list of rules. The first rule whose expression is true decides;
// when none is, a human decides (Require).
type ApprovalPolicy struct {
	// rules are evaluated in order; the first whose expression evaluates to true decides.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Rules []ApprovalRule `json:"rules,omitempty"`
}

// ApprovalRule is one CEL rule over a call's arguments and its requester.
type ApprovalRule struct {
	// name identifies the rule in the ToolCall's status, its events and its messages.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// expression is a CEL expression that evaluates to a bool. It sees `arguments` (the ToolCall's
	// spec.arguments), `requester` ({username, uid, groups}, empty when not recorded) and `preview`
	// ({present, failed, error, format, output, json, digest}: the Tool's preview, whose rules decide
	// after it, but for a Deny rule before any rule that reads it; present is false for a Tool
	// without one). There is no clock: a rule cannot depend on
	// the time of day.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +required
	Expression string `json:"expression"`

	// action is what happens to a call this rule matches: Deny, Approve or Require.
	// +required
	Action ApprovalAction `json:"action"`
}

// MCPToolAnnotations are the MCP tool annotation hints a Tool declares.
type MCPToolAnnotations struct {
	// readOnlyHint: the tool does not modify its environment.
	// +optional
	ReadOnlyHint *bool `json:"readOnlyHint,omitempty"`
	// destructiveHint: the tool may perform destructive updates (meaningful when not read-only).
	// +optional
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	// idempotentHint: calling the tool again with the same arguments has no additional effect.
	// +optional
	IdempotentHint *bool `json:"idempotentHint,omitempty"`
}

// ToolStatus is written by the controller only.
type ToolStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: ApprovalRulesReady (the approval rules compiled); Ready (calls can be accepted: the
	// approval rules and argumentsSchema compiled), and kstatus's Reconciling and Stalled (True when
	// they do not compile, a configuration error only a change of the Tool fixes).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=toolgate
// +kubebuilder:printcolumn:name="Tool Name",type=string,JSONPath=`.spec.toolName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Rules Ready",type=string,JSONPath=`.status.conditions[?(@.type=="ApprovalRulesReady")].status`,priority=1
// +kubebuilder:printcolumn:name="Execution Timeout",type=string,JSONPath=`.spec.executionTimeout`,priority=1
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.providerRef.name`,priority=1

// Tool tells Toolgate how to execute one tool in this namespace.
type Tool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ToolSpec `json:"spec"`

	// A Tool the controller has not checked yet reads with status.observedGeneration 0, older than
	// its generation: kstatus reports it InProgress from its creation, not Current.
	// +kubebuilder:default={observedGeneration: 0}
	// +optional
	Status ToolStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ToolList contains a list of Tool.
type ToolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Tool{}, &ToolList{})
}
