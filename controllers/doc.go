// Package controllers is Toolgate's manager: it builds the controller-runtime manager
// (ManagerOptions, NewManager), adds the controllers and the receiver to it (Setup), and registers
// every index of its cache, once (indexes.go). What runs in it:
//
//   - controllers/toolcall: the ToolCall controller. It puts a human approval (or the Tool's rule) in
//     front of every ToolCall and runs the Tool's Job only for a valid approval. Reconcile and its
//     phase table are in controller.go; each step has a file: acceptance.go, policy.go,
//     approval.go, asyncwait.go, toolversion.go, job.go and jobpods.go, deletion.go, gone.go
//     with gonereplay.go for ToolCalls the apiserver removed despite their finalizer, and
//     retention.go, which deletes finished ToolCalls once their time to live has passed.
//   - controllers/tool: the Tool controller, which reports whether each Tool's approval rules and
//     argumentsSchema compile (ApprovalRulesReady, and Ready with kstatus's conditions).
//   - controllers/approvalprovider: the controller of ApprovalProviders and ClusterApprovalProviders,
//     which checks each one's credential and reachability (Ready with kstatus's conditions),
//     provisions its AAP instance and registers its webhook receiver.
//   - controllers/mcpserver: the MCPServer controller, which lists each MCP server's tools (the MCP
//     Go SDK's client, internal/mcpclient) and owns one Tool per tool its spec.tools exposes, whose
//     Job runs cmd/mcp-call (internal/mcpcall) to call that tool once.
//   - controllers/receiver: the AAP webhook receiver, which answers providers' verification messages
//     and has notifications recorded on the ToolCalls they concern.
//   - controllers/toolcall/waiter: the long polls of pending approval requests, one goroutine each.
//
// Words. A call is accepted (toolcall/acceptance.go: its acceptance record, the finalizer and annotations that
// fix its timing, Tool version and provider); its request is submitted, and withdrawn (never
// "cancelled" by the manager: cancel is AAP's operation, and a call's phase); to record is to write
// into the ToolCall (its status, or its acceptance record), while a report is an event or a metric.
//
// What they share is in controllers/internal: lifecycle (the rules the ToolCall steps apply without
// the cluster: the outcome table, the run gate, timing, the acceptance record), providers (which
// provider serves a Tool, a client for each, the Secrets that consent to serve them),
// toolcache (what is derived from each Tool generation), readiness (the Ready, Reconciling and
// Stalled conditions of Tools, MCPServers and provider objects: Error, why one cannot be used, with
// its progress, reason and message; Writer, their one status write, against the resourceVersion
// read, and the one event of a change of Ready) and mergepatch (the one way status and finalizers
// are written).
//
// clientmetrics.go counts the manager's apiserver writes and provider requests and errors (by provider
// object); statemetrics.go computes the gauges of ToolCalls and provider readiness from the cache at
// each scrape, on every replica; restmapper.go keeps the REST
// mappings its cache asks for; tables.go gives the outcome, event and readiness tables, and manager.go
// the timing options, to the manager's users.
package controllers
