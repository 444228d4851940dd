// Package controllers is Toolgate's manager, and this comment is the map of its code (the README's
// layout links here). The manager is built in manager.go (ManagerOptions, NewManager, and the timing
// options its users set), which adds the controllers and the receiver to it (Setup); indexes.go
// registers every index of its cache, once. One package per controller, each named after the kind it
// reconciles, in the plural (as cert-manager names its controllers), so that no name repeats a
// package outside controllers/ (pkg/toolcall is the agents' Go client). Each has its envtest
// scenarios beside it, as an external test package; the tests of this package check the wiring.
//
//   - controllers/toolcalls: the ToolCall controller. It puts a human approval (or the Tool's rule)
//     in front of every ToolCall and runs the Tool's Job only for a valid approval. Reconcile and
//     its phase table are in controller.go; scope.go is one reconcile (the call, its acceptance
//     record, its provider client); each step has a file: acceptance.go, policy.go, approval.go
//     with providercalls.go, asyncwait.go, toolversion.go, job.go with jobpods.go and execproof.go
//     (the execution record), deletion.go, gone.go with gonereplay.go for ToolCalls the apiserver
//     removed despite their finalizer, and retention.go, which deletes finished ToolCalls once
//     their time to live has passed. Its long polls are controllers/toolcalls/waiter, one goroutine
//     per pending request.
//   - controllers/tools: the Tool controller, which reports whether each Tool's approval rules and
//     argumentsSchema compile (ApprovalRulesReady, and Ready with kstatus's conditions).
//   - controllers/approvalproviders: the controller of ApprovalProviders and
//     ClusterApprovalProviders, which checks each one's credential and reachability (Ready with
//     kstatus's conditions), provisions its AAP instance and registers its webhook receiver.
//   - controllers/mcpservers: the MCPServer controller, which lists each MCP server's tools (the MCP
//     Go SDK's client, internal/mcpclient) and owns one Tool per tool its spec.tools exposes, whose
//     Job runs cmd/mcp-call (internal/mcpcall) to call that tool once, with the image, resources
//     and scheduling of spec.executor (executor.go); a tool spec.previews names gets the Job that
//     calls its preview tool as its Tool's spec.preview, or no Tool without it (previews.go).
//   - controllers/receiver: the AAP webhook receiver, which answers providers' verification messages
//     and has notifications recorded on the ToolCalls they concern.
//
// What they share is in controllers/internal:
//
//   - controllers/internal/lifecycle: the rules the ToolCall steps apply without the cluster: the
//     outcome table (outcometable.go), the run gate (gate.go), the timing window (window.go), time
//     to live (ttl.go), the acceptance record (record.go: Record, the one writer and reader of its
//     annotations), how a Tool changed since (toolchange.go) and the request's context object.
//   - controllers/internal/providercache: which provider object serves a Tool, a client for each
//     (Registry), the Secrets that consent to serve them, and the indexes of their webhook
//     registrations; clusteroff.go is the manager without ClusterApprovalProviders
//     (--cluster-approval-providers=false), whose client never reads them.
//   - controllers/internal/toolcache: what is derived from each Tool generation (compiled rules and
//     schema).
//   - controllers/internal/readiness: the Ready, Reconciling and Stalled conditions of Tools,
//     MCPServers and provider objects: Error, why one cannot be used, with its progress, reason and
//     message; Writer, their one status write, against the resourceVersion read, and the one event
//     of a change of Ready.
//   - controllers/internal/mergepatch: the one way status and finalizers are written.
//
// Words. A call is accepted (controllers/toolcalls/acceptance.go); its acceptance record fixes its
// timing, Tool version and provider; its request is submitted, and withdrawn (never "cancelled" by
// the manager: cancel is AAP's operation, and a call's phase); to record is to write into the
// ToolCall (its status, or its acceptance record), while a report is an event or a metric.
//
// Beside the wiring: clientmetrics.go counts the manager's apiserver writes and provider requests
// and errors (by provider object); statemetrics.go computes the gauges of ToolCalls and provider
// readiness from the cache at each scrape, on every replica; restmapper.go keeps the REST mappings
// its cache asks for; tables.go gives the outcome, event and readiness tables to the manager's users.
package controllers
