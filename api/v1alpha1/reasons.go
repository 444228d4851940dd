package v1alpha1

// Finalizer keeps a ToolCall until no approval request for it can still be pending.
const Finalizer = "toolgate.dev/cancel-approval-request"

// FinalizerInstance keeps an ApprovalProvider or ClusterApprovalProvider with spec.provisioning until
// the AAP instance the manager created for it is deleted (which cancels its pending requests).
const FinalizerInstance = "toolgate.dev/delete-instance"

// FinalizerInUse keeps an ApprovalProvider or ClusterApprovalProvider with spec.credentialSecretRef
// while calls accepted with it have not ended: they go on using it (waits, cancellations) after its
// deletion was asked for, and new calls no longer pick it.
const FinalizerInUse = "toolgate.dev/in-use"

// A Secret serves a provider object only by consent: it carries the label of the object's kind with
// the object's name as value (in the namespace the object reads Secrets from), or the object owns it
// (the Secrets the manager creates for it carry the label too). The manager reads no other Secret's
// value, and says nothing of one in a condition.
const (
	// LabelProvider on a Secret names the ApprovalProvider of its namespace it serves.
	LabelProvider = "toolgate.dev/approval-provider"
	// LabelClusterProvider on a Secret in the cluster resource namespace names the
	// ClusterApprovalProvider it serves.
	LabelClusterProvider = "toolgate.dev/cluster-approval-provider"
)

// LabelKeep with the value "true" on a ToolCall keeps it forever once it has finished: the manager's
// retention (--finished-toolcall-ttl, a Tool's spec.finishedCallTTL) never deletes it. Any other
// value, or none, leaves the call to its retention.
const LabelKeep = "toolgate.dev/keep"

// Labels the controller puts on the Jobs (and their Pods) it creates.
const (
	LabelToolCallUID  = "toolgate.dev/toolcall-uid"
	LabelToolCallName = "toolgate.dev/toolcall"
	LabelToolName     = "toolgate.dev/tool"
	// LabelPreview, "true", marks a Tool's preview Job (and its Pods): it never runs the tool.
	LabelPreview = "toolgate.dev/preview"
)

// Annotations the controller writes when it accepts a ToolCall (with its finalizer, before the first
// submission): the acceptance record. They fix the ToolCall's timing and its approval request body for
// the rest of its life, so that a submission repeated after a crash is an exact replay, and bind the
// call to the version of its Tool: the Job is created only from the Tool with this UID at this
// generation.
const (
	// AnnotationExecutionTimeout is the Tool's executionTimeout at acceptance.
	AnnotationExecutionTimeout = "toolgate.dev/execution-timeout"
	// AnnotationApprovalTimeout is the approval timeout requested from the provider.
	AnnotationApprovalTimeout = "toolgate.dev/approval-timeout"
	// AnnotationToolUID is the UID of the Tool at acceptance.
	AnnotationToolUID = "toolgate.dev/tool-uid"
	// AnnotationToolGeneration is the Tool's metadata.generation at acceptance.
	AnnotationToolGeneration = "toolgate.dev/tool-generation"
	// AnnotationProvider is the approvals provider the call was accepted with, "ApprovalProvider/name",
	// "ClusterApprovalProvider/name", or "" for the manager's own provider flags. Every later step
	// (submit, wait, cancel) uses it. Absent means the manager's flags.
	AnnotationProvider = "toolgate.dev/provider"
	// AnnotationProviderInstance is the AAP instance, of a provider with spec.provisioning, that the
	// call's request is submitted to and read from: the provider's instance when the call was accepted,
	// or, if it had none yet, when the call was first submitted. A replaced instance keeps serving the
	// calls that name it until they end.
	AnnotationProviderInstance = "toolgate.dev/provider-instance"
	// AnnotationToolName is the Tool's metadata.name at acceptance, sent in the request's context.
	AnnotationToolName = "toolgate.dev/tool-name"
	// AnnotationApprovalRule names the Approve rule that decided the call at acceptance. Its presence
	// records that no request was ever submitted for the call, so none is recovered or withdrawn after
	// a crash, even once the Tool (and with it the rule) has changed.
	AnnotationApprovalRule = "toolgate.dev/approval-rule"
	// AnnotationGoneCursor, on the manager's Lease toolgate-gone-cursor, is the position in the ToolCall
	// watch (a resourceVersion) up to which every ToolCall the apiserver removed despite its finalizer
	// has had its request withdrawn; a new leader replays the removals since.
	AnnotationGoneCursor = "toolgate.dev/gone-cursor"
	// AnnotationExecutionProof is set by the manager on every Job it creates: a MAC, under a key only
	// the manager reads (the Secret toolgate-execution-key in its namespace), of the Job's namespace,
	// its name and the UID of the ToolCall it runs. A Job under a call's name without a valid proof
	// was made by someone else and never becomes the call's record.
	AnnotationExecutionProof = "toolgate.dev/execution-proof"
	// AnnotationJobDecision, on a Job the manager creates, is the decision that started it: the
	// ToolCall's status.decision as JSON, without the note, covered by the execution proof. A call
	// whose status write was lost after its Job was created gets its decision back from it.
	AnnotationJobDecision = "toolgate.dev/decision"
)

// Reasons of an ApprovalProvider's or ClusterApprovalProvider's Ready condition.
const (
	// ReasonReachable: an authenticated read at the provider succeeded.
	ReasonReachable = "Reachable"
	// ReasonCredentialUnavailable: the credential Secret or its key is missing or empty.
	ReasonCredentialUnavailable = "CredentialUnavailable"
	// ReasonCABundleInvalid: the CA bundle (inline, or its Secret or ConfigMap key) is missing or holds
	// no PEM certificate.
	ReasonCABundleInvalid = "CABundleInvalid"
	// ReasonCredentialRejected: the provider does not know the credential (401).
	ReasonCredentialRejected = "CredentialRejected"
	// ReasonCredentialForbidden: the provider knows the credential but it may not make approval
	// requests (403), as a provisioner token used as an instance credential.
	ReasonCredentialForbidden = "CredentialForbidden"
	// ReasonUnreachable: the provider could not be reached, or answered with an error.
	ReasonUnreachable = "Unreachable"
	// ReasonProvisioningFailed: the AAP instance of spec.provisioning could not be created, or its
	// credential's Secret could not be written.
	ReasonProvisioningFailed = "ProvisioningFailed"
)

// The Delivery condition of a provider object with spec.delivery (asynchronous mode), and its reasons.
const (
	// ConditionDelivery: True while the provider delivers notifications for the current instance to
	// spec.delivery.receiverURL.
	ConditionDelivery = "Delivery"
	// ReasonRegistered: the provider verified the receiver and committed the registration.
	ReasonRegistered = "Registered"
	// ReasonRegistering: a registration is being submitted.
	ReasonRegistering = "Registering"
	// ReasonVerificationFailed: the provider could not verify the receiver (422): it did not
	// reach it, or the receiver did not answer the challenge.
	ReasonVerificationFailed = "VerificationFailed"
	// ReasonRegistrationFailed: the provider refused the registration, or could not be reached.
	ReasonRegistrationFailed = "RegistrationFailed"
)

// Condition types on a ToolCall. Ready, Reconciling and Stalled are also on Tools, ApprovalProviders
// and ClusterApprovalProviders, where they say whether the object can be used.
const (
	// ConditionApproved: True once a valid approval was obtained; False when it will not be.
	ConditionApproved = "Approved"
	// ConditionExecuted: True once the Job exists (the tool was started); False when it never will.
	ConditionExecuted = "Executed"
	// ConditionReady: True once the ToolCall reached a terminal phase and its outcome is final. On a
	// Tool: its calls can be accepted (its approval rules and argumentsSchema compiled). On a provider
	// object: an authenticated read at the provider succeeded.
	ConditionReady = "Ready"
	// ConditionReconciling (kstatus): True while the call is Pending, AwaitingApproval or Running;
	// False once it ended. kstatus, and the tools built on it (Flux's wait, kapply, Config Sync),
	// report such a ToolCall InProgress. On a provider object: True while the manager retries a
	// provider it could not read (Ready False, Unreachable or ProvisioningFailed).
	ConditionReconciling = "Reconciling"
	// ConditionStalled (kstatus): set once the call ended; True for every outcome other than
	// Succeeded (the tool did not run, or ran and failed), which kstatus reports as Failed. On a Tool
	// or provider object: True on a configuration error that only a change fixes (rules or a schema
	// that do not compile, a missing or refused credential, an invalid CA bundle).
	ConditionStalled = "Stalled"
)

// ConditionApprovalRulesReady is the Tool condition that says whether its approval rules compiled.
const ConditionApprovalRulesReady = "ApprovalRulesReady"

// Reasons of a Tool's Ready condition, besides InvalidApprovalRules (its rules do not compile). They
// are also the reasons of its Reconciling and Stalled conditions, and of the event that reports a
// change of Ready; likewise for the reasons of a provider object's Ready condition.
const (
	// ReasonSpecCompiled: the Tool's approval rules and argumentsSchema compiled (or it has none): its
	// calls can be accepted.
	ReasonSpecCompiled = "SpecCompiled"
	// ReasonInvalidArgumentsSchema: the Tool's spec.argumentsSchema does not compile; its calls end
	// Rejected (InvalidTool).
	ReasonInvalidArgumentsSchema = "InvalidArgumentsSchema"
)

// Reasons are used in status.reason, condition reasons and event reasons: stable CamelCase words, each
// Go name the word itself. They are grouped by the phase they are first recorded with; a reason
// recorded with several phases says so.

// Pending.
const (
	// ReasonSubmitFailed: the approval request could not be submitted yet; retried until the waiting
	// limit.
	ReasonSubmitFailed = "SubmitFailed"
	// ReasonProviderNotReady: the call's approvals provider (an ApprovalProvider or
	// ClusterApprovalProvider) is missing or not Ready; the message names it and what is wrong. The
	// call is submitted once it is fixed, within the waiting limit.
	ReasonProviderNotReady = "ProviderNotReady"
	// ReasonPolicyApproved: an Approve rule of the Tool's spec.approval matched; no human was asked.
	// Pending while the Job is created; also the Approved condition's reason and an event's.
	ReasonPolicyApproved = "PolicyApproved"
	// ReasonPreviewRunning: the Tool's preview Job runs; the request is submitted once its output is
	// recorded (status.preview).
	ReasonPreviewRunning = "PreviewRunning"
)

// AwaitingApproval.
const (
	// ReasonAwaitingApproval: the provider holds a pending approval request.
	ReasonAwaitingApproval = "AwaitingApproval"
)

// Running.
const (
	// ReasonJobCreated: approved while valid; the Job exists.
	ReasonJobCreated = "JobCreated"
	// ReasonImageUnavailable: the call's Job exists but its container has not started because the node
	// cannot get the image (ErrImageNeverPull, ErrImagePull/ImagePullBackOff, InvalidImageName,
	// ImageInspectError); a Running call, or a Failed one whose Job's deadline passed while it waited.
	ReasonImageUnavailable = "ImageUnavailable"
)

// Succeeded.
const (
	// ReasonJobSucceeded: the Job completed.
	ReasonJobSucceeded = "JobSucceeded"
)

// Failed.
const (
	// ReasonJobFailed: the Job failed (a container exited non-zero, or its deadline passed).
	ReasonJobFailed = "JobFailed"
	// ReasonToolMayHaveRun: the Job of a Tool an MCPServer generated failed after the call may have
	// reached the MCP server (a lost connection, mcp-call's exit code 3, or a kill, an eviction or a
	// lost node while it ran): the tool may have run. It is never called again, and never reported
	// as not run.
	ReasonToolMayHaveRun = "ToolMayHaveRun"
	// ReasonJobMissing: the Job was deleted before it finished; its outcome is unknown.
	ReasonJobMissing = "JobMissing"
	// ReasonForeignJob: a Job under the name of the call's Job was not created by Toolgate (it carries
	// no valid execution proof, or another UID than the one recorded). Before the start the call ends
	// Failed without running; a running call whose Job was replaced by such a Job ends Failed, its
	// outcome unknown. Also the reason of the Warning event that names the Job.
	ReasonForeignJob = "ForeignJob"
	// ReasonForeignPod: a Pod that the call's Job counted was not made from the Job's template
	// (someone else created it, with the Job's selector labels or its owner reference): the Job's
	// outcome is not the tool's, so the call ends Failed, its outcome unknown. Also the reason of the
	// Warning event that names the Pod.
	ReasonForeignPod = "ForeignPod"
	// ReasonJobRefused: approved, but the apiserver refused the Job as invalid.
	ReasonJobRefused = "JobRefused"
	// ReasonInvalidTool: the Tool cannot make the call's Job: gone or ambiguous when the Job was about
	// to be created (Failed), or an invalid jobTemplate or argumentsSchema (Rejected).
	ReasonInvalidTool = "InvalidTool"
	// ReasonToolChanged: the Tool was changed, or deleted and created again, after the ToolCall was
	// accepted; the approval covers the accepted version only, so the call does not run. Failed at the
	// run gate, Cancelled while awaiting a decision, Rejected before the request was submitted.
	ReasonToolChanged = "ToolChanged"
	// ReasonProviderChanged: the call was approved at the provider it was accepted with, which no
	// longer serves its Tool's calls (a namespace's default provider created since, or another
	// spec.providerRef); the approval is not the current approver pool's, so the call does not run.
	ReasonProviderChanged = "ProviderChanged"
)

// Denied.
const (
	// ReasonDenied: a human denied the call.
	ReasonDenied = "Denied"
)

// Expired.
const (
	// ReasonApprovalExpired: the approval had expired when the Job was about to be created.
	ReasonApprovalExpired = "ApprovalExpired"
)

// ApprovalUnavailable.
const (
	// ReasonProviderExpired: the provider's deadline for a decision passed without one.
	ReasonProviderExpired = "ProviderExpired"
	// ReasonWaitingLimitReached: no usable decision before the approval limit.
	ReasonWaitingLimitReached = "WaitingLimitReached"
	// ReasonUntrustedProviderResponse: a provider answer could not be trusted.
	ReasonUntrustedProviderResponse = "UntrustedProviderResponse"
	// ReasonIdempotencyConflict: the provider holds another request under the call's idempotency key
	// (409 idempotency_conflict). The call fails closed: no request is made under a new key.
	ReasonIdempotencyConflict = "IdempotencyConflict"
	// ReasonApprovalRequestLost: the provider no longer knows a request it created (404).
	ReasonApprovalRequestLost = "ApprovalRequestLost"
	// ReasonArgumentsChanged: the approval covers other arguments than the spec now holds.
	ReasonArgumentsChanged = "ArgumentsChanged"
)

// Cancelled.
const (
	// ReasonProviderCancelled: the provider reports the request cancelled.
	ReasonProviderCancelled = "ProviderCancelled"
)

// Rejected: bad input caught before any human is asked.
const (
	ReasonUnknownTool       = "UnknownTool"
	ReasonAmbiguousTool     = "AmbiguousTool"
	ReasonInvalidArguments  = "InvalidArguments"
	ReasonArgumentsTooLarge = "ArgumentsTooLarge"
	ReasonTimeoutDoesNotFit = "TimeoutDoesNotFit"
	// ReasonInvalidApprovalRules: the Tool's spec.approval does not compile (the reason its calls end
	// Rejected, and the Tool's ApprovalRulesReady condition).
	ReasonInvalidApprovalRules = "InvalidApprovalRules"
	// ReasonPolicyDenied: a Deny rule of the Tool's spec.approval matched; the message names the rule.
	ReasonPolicyDenied = "PolicyDenied"
	// ReasonAcceptanceRecordInvalid: the ToolCall carries the finalizer but its acceptance annotations
	// are missing or are not values the controller would write (e.g. created with them).
	ReasonAcceptanceRecordInvalid = "AcceptanceRecordInvalid"
	// ReasonProviderRefused: the provider refused the request before any human saw it (400).
	ReasonProviderRefused = "ProviderRefused"
	// ReasonClusterProvidersOff: the Tool's spec.providerRef names a ClusterApprovalProvider, and the
	// manager is namespace-scoped with ClusterApprovalProviders off (--cluster-approval-providers=false,
	// the chart's scope.namespaces). The reason of the call's Rejected and of the Tool's Ready False.
	ReasonClusterProvidersOff = "ClusterProvidersOff"
	// ReasonPreviewFailed: the Tool's preview failed, timed out or gave more than its maxBytes, and
	// the Tool's spec.preview.onFailure is Deny; the message says what went wrong.
	ReasonPreviewFailed = "PreviewFailed"
	// ReasonPreviewNotVerified: status.preview is not a record the manager wrote (its proof does not
	// verify), or a Job the manager did not create holds the preview Job's name: nothing runs.
	ReasonPreviewNotVerified = "PreviewNotVerified"
	// ReasonInvalidPreview: the Tool's spec.preview.jobTemplate is not a Job template the apiserver
	// accepts (the message says why); also the Tool's Ready reason.
	ReasonInvalidPreview = "InvalidPreview"
)

// Reasons of conditions only.
const (
	// ReasonApproved: the Approved condition of a call a human approved while the approval was valid.
	ReasonApproved = "Approved"
	// ReasonApprovalRulesCompiled: every rule of the Tool's spec.approval compiled (Tool condition).
	ReasonApprovalRulesCompiled = "ApprovalRulesCompiled"
)

// Reasons of events only.
const (
	// ReasonCancelRequested: the pending request of a deleted ToolCall was cancelled.
	ReasonCancelRequested = "CancelRequested"
	// ReasonCancelFailed: a request could not be cancelled; it ends at its provider deadline.
	ReasonCancelFailed = "CancelFailed"
	// ReasonPolicyEvaluationFailed: a rule could not be evaluated for this call; a human is asked
	// instead.
	ReasonPolicyEvaluationFailed = "PolicyEvaluationFailed"
	// ReasonRequestNotOwn: status.requestID named a request the call did not submit (someone else
	// wrote the status); the call follows the request submitted under its own idempotency key.
	ReasonRequestNotOwn = "RequestNotOwn"
	// ReasonDecisionNotVerified: status.decision recorded a rule's approval the Tool's rules do not
	// give (someone else wrote the status); it was dropped.
	ReasonDecisionNotVerified = "DecisionNotVerified"
	// ReasonGoneCursorAhead (on the Lease toolgate-gone-cursor): the saved position of withdrawn
	// removals was past the apiserver's present, so not a manager's; the new leader replayed the
	// removals from as far back as the apiserver keeps watch history instead.
	ReasonGoneCursorAhead = "GoneCursorAhead"
)

// Reasons of an MCPServer's Ready condition (also those of its Reconciling and Stalled conditions and
// of the event that reports a change of Ready). CABundleInvalid is shared with provider objects.
const (
	// ReasonToolsDiscovered: the server's tools were listed and every tool spec.tools exposes has its
	// Tool.
	ReasonToolsDiscovered = "ToolsDiscovered"
	// ReasonServerUnreachable: the server could not be reached, or its initialization or tools/list
	// failed; the manager tries again and keeps the Tools it generated as they are meanwhile.
	ReasonServerUnreachable = "ServerUnreachable"
	// ReasonHeaderSecretUnavailable: a Secret of spec.headers is missing, does not consent to serve
	// the MCPServer (label toolgate.dev/mcp-server), or lacks its key.
	ReasonHeaderSecretUnavailable = "HeaderSecretUnavailable"
	// ReasonToolNameConflict: a Tool the MCPServer would generate exists and is not its own; that tool
	// gets no Tool until the other one is renamed or removed.
	ReasonToolNameConflict = "ToolNameConflict"
	// ReasonInvalidMCPServerSpec: the spec holds what the manager cannot use although the apiserver
	// accepted it, such as an entry of spec.tools that is not a valid glob or an executor image that
	// is not an image reference, or it names no executor image and the manager has no default
	// (--mcp-executor-image).
	ReasonInvalidMCPServerSpec = "InvalidMCPServerSpec"
	// ReasonServerResponseTooLarge: the server's answers to one listing are larger than the manager
	// reads (its --mcp-max-response-bytes); the Tools generated before are kept as they are.
	ReasonServerResponseTooLarge = "ServerResponseTooLarge"
	// ReasonServerEventTooLarge: the server sent a server-sent event larger than the manager reads
	// (its --mcp-max-event-bytes).
	ReasonServerEventTooLarge = "ServerEventTooLarge"
	// ReasonTooManyTools: the server lists more tools (or pages) than the manager reads (its
	// --mcp-max-tools).
	ReasonTooManyTools = "TooManyTools"
	// ReasonToolSchemaTooLarge: an exposed tool's inputSchema is larger than the manager's
	// --mcp-max-schema-bytes; that tool gets no Tool.
	ReasonToolSchemaTooLarge = "ToolSchemaTooLarge"
	// ReasonToolDescriptionTooLarge: an exposed tool's description or title is larger than the
	// manager's --mcp-max-description-bytes; that tool gets no Tool.
	ReasonToolDescriptionTooLarge = "ToolDescriptionTooLarge"
	// ReasonToolNameTooLong: an exposed tool's name is longer than the manager's
	// --mcp-max-tool-name-bytes; that tool gets no Tool.
	ReasonToolNameTooLong = "ToolNameTooLong"
	// ReasonPreviewToolNotListed: an exposed tool's spec.previews entry names a previewTool the server
	// does not list; that tool gets no Tool (fail closed: its calls must not run without the preview
	// asked for) until the server lists it or the entry changes.
	ReasonPreviewToolNotListed = "PreviewToolNotListed"
)
