package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// MaxArgumentsBytes is the largest serialized spec.arguments a ToolCall may carry.
const MaxArgumentsBytes = 64 * 1024

// MaxReasonBytes is the largest spec.reason a ToolCall may carry.
const MaxReasonBytes = 4 * 1024

// MaxResultBytes is the largest status.result the controller records (the Job's termination message).
const MaxResultBytes = 4 * 1024

// ToolCallSpec is one request to run a tool. It is immutable: what a human approved is what runs.
// +kubebuilder:validation:XValidation:rule="!has(self.timeout) || !self.timeout.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') || !self.waitingLimit.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self.timeout) <= duration(self.waitingLimit)",message="timeout must not exceed waitingLimit: the approval has to arrive while the caller is still waiting"
type ToolCallSpec struct {
	// tool is the toolName of a Tool in this namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +required
	Tool string `json:"tool"`

	// arguments are the tool's arguments as a JSON object (at most 64 KiB serialized). They are shown to
	// the approver and passed to the Job as TOOL_ARGUMENTS.
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	// +required
	Arguments runtime.RawExtension `json:"arguments"`

	// waitingLimit is how long the caller will wait in total, from creation to the result.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="waitingLimit must be a positive duration such as 90s, 30m or 1h30m"
	// +required
	WaitingLimit metav1.Duration `json:"waitingLimit"`

	// timeout is the approval timeout requested from the provider. Default: the largest that fits in
	// the waiting limit after the Tool's execution timeout and the controller's margins.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s')",message="timeout must be a duration of at least 1s such as 90s, 30m or 1h30m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// reason is the agent's own explanation of why it makes the call (at most 4 KiB of UTF-8). It is sent
	// to the provider as the request's agent_reasoning, which approvers are shown as the agent's claim,
	// never as a verified fact.
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="size(bytes(self)) <= 4096",message="reason must be at most 4096 bytes (4 KiB) of UTF-8: shorten spec.reason"
	// +optional
	Reason string `json:"reason,omitempty"`

	// requester is who created the ToolCall, as the apiserver authenticated them. It is written at
	// creation by the MutatingAdmissionPolicy that config/admission ships (any value the client sends
	// is overwritten) and, like the rest of spec, never changes afterwards. Absent when the ToolCall
	// was created on a cluster without that policy.
	// +optional
	Requester *Requester `json:"requester,omitempty"`
}

// Requester is the authenticated identity that created a ToolCall (the admission request's userInfo).
// Its fields are always written together and never omitted, so that a client which reads the ToolCall
// and writes it back sends the same value.
type Requester struct {
	// username is the user's name, e.g. system:serviceaccount:payments:refund-agent.
	Username string `json:"username"`
	// uid is the user's uid when the authenticator provides one (ServiceAccount tokens do), else empty.
	UID string `json:"uid"`
	// groups are the user's groups.
	// +listType=atomic
	Groups []string `json:"groups"`
}

// ToolCallPhase is where a ToolCall is in its life.
// +kubebuilder:validation:Enum=Pending;AwaitingApproval;Running;Succeeded;Failed;Denied;Expired;ApprovalUnavailable;Cancelled;Rejected
type ToolCallPhase string

const (
	// PhasePending: accepted, the approval request is not submitted yet.
	PhasePending ToolCallPhase = "Pending"
	// PhaseAwaitingApproval: the provider holds a pending approval request.
	PhaseAwaitingApproval ToolCallPhase = "AwaitingApproval"
	// PhaseRunning: approved while valid; the Job exists.
	PhaseRunning ToolCallPhase = "Running"
	// PhaseSucceeded: the Job completed.
	PhaseSucceeded ToolCallPhase = "Succeeded"
	// PhaseFailed: the Job failed.
	PhaseFailed ToolCallPhase = "Failed"
	// PhaseDenied: a human denied the request.
	PhaseDenied ToolCallPhase = "Denied"
	// PhaseExpired: approved, but the approval had expired when the Job was about to be created.
	PhaseExpired ToolCallPhase = "Expired"
	// PhaseApprovalUnavailable: no valid decision could be obtained within the limit. Never a denial.
	PhaseApprovalUnavailable ToolCallPhase = "ApprovalUnavailable"
	// PhaseCancelled: the provider reports the request cancelled.
	PhaseCancelled ToolCallPhase = "Cancelled"
	// PhaseRejected: bad input caught before asking a human.
	PhaseRejected ToolCallPhase = "Rejected"
)

// IsTerminal reports whether nothing more will happen to a ToolCall in this phase.
func (p ToolCallPhase) IsTerminal() bool {
	switch p {
	case PhaseSucceeded, PhaseFailed, PhaseDenied, PhaseExpired, PhaseApprovalUnavailable, PhaseCancelled, PhaseRejected:
		return true
	}
	return false
}

// OrPending is the phase as people read it: a ToolCall the controller has not seen yet (no phase) is
// Pending.
func (p ToolCallPhase) OrPending() ToolCallPhase {
	if p == "" {
		return PhasePending
	}
	return p
}

// Decision sources: who decided a ToolCall.
const (
	// DecisionSourceProvider: the approvals provider (a human, or its own expiry or cancellation).
	DecisionSourceProvider = "Provider"
	// DecisionSourcePolicy: a rule of the Tool's spec.approval; decision.rule names it.
	DecisionSourcePolicy = "Policy"
)

// Decision is the decision on the call, as recorded by the controller: the provider's answer to the
// approval request, or the Tool's approval rule that decided without asking a human.
type Decision struct {
	// status is the decision: approved, denied, expired or cancelled.
	Status string `json:"status"`
	// source is who decided: Provider (the approvals provider) or Policy (a rule of the Tool's
	// spec.approval, named by rule). Empty means Provider.
	// +kubebuilder:validation:Enum=Provider;Policy
	// +optional
	Source string `json:"source,omitempty"`
	// rule is the name of the Tool's approval rule that decided, when source is Policy.
	// +optional
	Rule string `json:"rule,omitempty"`
	// note is the approver's note.
	// +optional
	Note string `json:"note,omitempty"`
	// decidedAt is when the decision was recorded by the provider.
	// +optional
	DecidedAt *metav1.Time `json:"decidedAt,omitempty"`
	// expiresAt is when an approval stops being valid: the Job must be created before it.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// responseDigest is the SHA-256 (sha256:<hex>) of the provider's response that carried the
	// decision, byte for byte as received; the call's receipt binds it.
	// +optional
	ResponseDigest string `json:"responseDigest,omitempty"`
}

// PreviewFormat is how a preview's output reads.
// +kubebuilder:validation:Enum=json;text
type PreviewFormat string

const (
	// PreviewFormatJSON: the output is one JSON object or array.
	PreviewFormatJSON PreviewFormat = "json"
	// PreviewFormatText: any other output, shown as text.
	PreviewFormatText PreviewFormat = "text"
)

// PreviewRecord is a preview's outcome as the manager recorded it. It is the tool's own claim of
// what the call would do: the manager ran the preview but does not check what it says.
type PreviewRecord struct {
	// jobName is the preview Job.
	// +optional
	JobName string `json:"jobName,omitempty"`
	// output is the preview's output (the termination message of its Job's first container), at most
	// the Tool's spec.preview.maxBytes; empty when the preview failed.
	// +optional
	Output string `json:"output,omitempty"`
	// format is json when output is one JSON object or array, else text.
	// +optional
	Format PreviewFormat `json:"format,omitempty"`
	// digest is sha256:<hex> of output, the value the execution Job receives as
	// TOOLGATE_PREVIEW_DIGEST; empty when the preview failed.
	// +optional
	Digest string `json:"digest,omitempty"`
	// image is the image of the container that gave the output, as its template names it.
	// +optional
	Image string `json:"image,omitempty"`
	// imageID is that container's image as the kubelet reported it (with its digest).
	// +optional
	ImageID string `json:"imageID,omitempty"`
	// error says why the preview failed, timed out or was refused; empty when it gave its output.
	// +optional
	Error string `json:"error,omitempty"`
	// completedAt is when the manager recorded the preview's outcome.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// proof is the manager's MAC over this record and the ToolCall (with its execution key): a
	// record it does not verify is not the manager's, and the call ends without running.
	// +optional
	Proof string `json:"proof,omitempty"`
}

// Execution is what ran, as the kubelet reported it when the Job ended.
type Execution struct {
	// podName is the Pod whose result was recorded (the newest that ended).
	// +optional
	PodName string `json:"podName,omitempty"`
	// podUID is that Pod's UID.
	// +optional
	PodUID types.UID `json:"podUID,omitempty"`
	// nodeName is the node it ran on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// containers are the Pod's containers that the Tool's Job template declares.
	// +listType=atomic
	// +optional
	Containers []ExecutedContainer `json:"containers,omitempty"`
	// resultTruncated says the termination message was longer than status.result holds.
	// +optional
	ResultTruncated bool `json:"resultTruncated,omitempty"`
}

// ExecutedContainer is one container of the tool's Pod.
type ExecutedContainer struct {
	// name is the container's name in the Tool's Job template.
	Name string `json:"name"`
	// image is the image the template names.
	Image string `json:"image"`
	// imageID is the image the kubelet ran, with its digest (e.g. docker.io/library/x@sha256:…).
	// +optional
	ImageID string `json:"imageID,omitempty"`
	// startedAt is when the container started, as the kubelet reported it.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// finishedAt is when it ended.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// exitCode is its exit code.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
}

// Receipt is the call's signed receipt: an in-toto Statement in a DSSE envelope (docs/receipts.md).
type Receipt struct {
	// envelope is the DSSE envelope, as JSON: the file cosign verify-blob-attestation reads.
	Envelope string `json:"envelope"`
	// digest is the SHA-256 of the envelope's payload (sha256:<hex>), as the next receipt names it.
	Digest string `json:"digest"`
	// sequence counts the namespace's receipts from 1.
	Sequence int64 `json:"sequence"`
	// previous is the digest of the namespace's receipt before it; empty for the first.
	// +optional
	Previous string `json:"previous,omitempty"`
	// keyID is the id of the key that signed it.
	KeyID string `json:"keyID"`
}

// ToolCallStatus is written by the controller only.
type ToolCallStatus struct {
	// phase summarises where the ToolCall is.
	// +optional
	Phase ToolCallPhase `json:"phase,omitempty"`
	// requestID is the provider's approval request id.
	// +optional
	RequestID string `json:"requestID,omitempty"`
	// deadlineAt is the provider's deadline for a decision.
	// +optional
	DeadlineAt *metav1.Time `json:"deadlineAt,omitempty"`
	// decision is the provider's decision once there is one.
	// +optional
	Decision *Decision `json:"decision,omitempty"`
	// notification is the last AAP notification (asynchronous mode) that the request was decided,
	// recorded by the manager's receiver before it acknowledged it. It carries no decision: it only
	// makes the manager read the request.
	// +optional
	Notification *Notification `json:"notification,omitempty"`
	// preview is what the Tool's preview said, recorded before the approval request is first
	// submitted, so that every submission sends the same body.
	// +optional
	Preview *PreviewRecord `json:"preview,omitempty"`
	// jobName is the Job executing the tool. Its existence is the record that the tool was started.
	// +optional
	JobName string `json:"jobName,omitempty"`
	// jobUID is the UID of that Job, recorded once the manager created it (or found the Job it had
	// created): a Job later found under jobName with another UID was put there by someone else.
	// +optional
	JobUID types.UID `json:"jobUID,omitempty"`
	// result is the Job's termination message (at most 4 KiB).
	// +optional
	Result string `json:"result,omitempty"`
	// execution is what ran: the Pod, its node, and each container's image digest, start, end and
	// exit code, recorded when the Job ended.
	// +optional
	Execution *Execution `json:"execution,omitempty"`
	// receipt is the call's signed receipt, written once the call ended.
	// +optional
	Receipt *Receipt `json:"receipt,omitempty"`
	// reason is a CamelCase word for the current phase, e.g. Denied or WaitingLimitReached.
	// +optional
	Reason string `json:"reason,omitempty"`
	// message is a sentence a person or an agent can read.
	// +optional
	Message string `json:"message,omitempty"`
	// conditions: Approved, Executed and Ready, and kstatus's Reconciling (True while the call is
	// under way) and Stalled (True once it ended in any outcome but Succeeded).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tcall,categories=toolgate
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.spec.tool`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.status.decision.status`
// +kubebuilder:printcolumn:name="Job",type=string,JSONPath=`.status.jobName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Rule",type=string,JSONPath=`.status.decision.rule`,priority=1
// +kubebuilder:printcolumn:name="Requester",type=string,JSONPath=`.spec.requester.username`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1

// ToolCall asks for a tool to be run once a human approved it.
type ToolCall struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is immutable. Durations are compared by value, not by spelling: a client that decodes
	// "45m" and encodes it again as "45m0s" (every Go client using metav1.Duration) has not changed
	// the spec and must still be able to update metadata. A field added to ToolCallSpec must be added
	// to this rule too.

	// +kubebuilder:validation:XValidation:rule="self == oldSelf || (self.tool == oldSelf.tool && self.arguments == oldSelf.arguments && self.waitingLimit.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self.waitingLimit) == duration(oldSelf.waitingLimit) && has(self.timeout) == has(oldSelf.timeout) && (!has(self.timeout) || (self.timeout.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self.timeout) == duration(oldSelf.timeout))) && has(self.requester) == has(oldSelf.requester) && (!has(self.requester) || self.requester == oldSelf.requester) && has(self.reason) == has(oldSelf.reason) && (!has(self.reason) || self.reason == oldSelf.reason))",message="spec is immutable: what a human approved is what runs; create a new ToolCall instead"
	// +required
	Spec ToolCallSpec `json:"spec"`

	// A ToolCall the controller has not written yet reads with status.observedGeneration 0, older than
	// its generation: kstatus reports it InProgress from its creation, not Current.
	// +kubebuilder:default={observedGeneration: 0}
	// +optional
	Status ToolCallStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ToolCallList contains a list of ToolCall.
type ToolCallList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ToolCall `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ToolCall{}, &ToolCallList{})
}

// Notification is an AAP request.resolved event as the receiver recorded it.
type Notification struct {
	// id is the event's id (its webhook-id): a repeated delivery of it is acknowledged without acting.
	ID string `json:"id"`
	// receivedAt is when the receiver recorded it.
	ReceivedAt metav1.Time `json:"receivedAt"`
}
