// Command manager runs the Toolgate controller: every ToolCall waits for a human approval from the
// approvals provider before its Job is created.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/internal/provider"
)

// gcPercent is the manager's garbage-collection target unless GOGC is set. Its heap is mostly state
// that lives as long as a ToolCall waits (the cached ToolCall and one long poll in flight for each
// pending request) and it allocates little while it waits, so collecting when the heap has grown by
// a quarter instead of Go's default doubling keeps its resident memory near what is live, for about
// a fifth of the manager's CPU while it carries the most load (measured in docs/performance.md).
const gcPercent = 25

// main parses the command line, builds the provider client and the manager, and runs the manager
// until a termination signal. It exits the process when the manager cannot start or stops with an
// error.
func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	var (
		providerURL, credentialFile, caFile, namespaces string
		providerMaxConns                                int
		clusterProviders                                bool
		o                                               controllers.Options
	)
	o = controllers.DefaultOptions()
	timing := o.Timing
	flag.StringVar(&providerURL, "provider-url", "", "Base URL of the manager's own approvals provider, e.g. https://approvals.example.com: the provider of calls no ApprovalProvider or ClusterApprovalProvider applies to (empty: none).")
	flag.StringVar(&credentialFile, "provider-credential-file", "", "File holding the provider instance credential (mounted from a Secret).")
	flag.StringVar(&caFile, "provider-ca-file", "", "PEM file of CAs to trust for the provider instead of the system pool.")
	flag.StringVar(&o.ReceiptKeySecret, "receipt-key-secret", o.ReceiptKeySecret, "Secret, in the manager's namespace, whose field \"key\" holds the PEM private key (ECDSA P-256 or Ed25519) that signs the receipts of ended ToolCalls; made with a new ECDSA P-256 key when missing (docs/receipts.md).")
	flag.StringVar(&o.ClusterResourceNamespace, "cluster-resource-namespace", o.ClusterResourceNamespace, "Namespace of the Secrets and ConfigMaps that ClusterApprovalProviders name.")
	flag.DurationVar(&o.PollWait, "poll-wait", o.PollWait, "Long-poll wait sent as ?wait= (1s to 30s, AAP's cap).")
	flag.DurationVar(&timing.ReturnMargin, "return-margin", timing.ReturnMargin, "Time kept at the end of a waiting limit to return the result.")
	flag.DurationVar(&timing.FinalStateMargin, "final-state-margin", timing.FinalStateMargin, "Time allowed after the provider deadline to read its final state.")
	flag.DurationVar(&timing.SubmitAllowance, "submit-allowance", timing.SubmitAllowance, "Time left for submitting when the approval timeout is defaulted.")
	flag.DurationVar(&timing.SkewMargin, "skew-margin", timing.SkewMargin, "An approval is treated as expired this long before decision.expires_at.")
	flag.DurationVar(&o.CancelGiveUp, "cancel-give-up", o.CancelGiveUp, "How long deleting a ToolCall keeps trying to cancel its request on an unreachable provider.")
	flag.DurationVar(&o.FinishedCallTTL, "finished-toolcall-ttl", o.FinishedCallTTL, "How long a finished ToolCall is kept, counted from when it finished, before the manager deletes it (with its Job); a Tool's spec.finishedCallTTL wins over it, and a ToolCall labelled toolgate.dev/keep=true is kept. 0: keep forever; otherwise at least 1m.")
	flag.IntVar(&providerMaxConns, "provider-max-conns", 0, "Upper bound on connections to the provider (0: none; each pending long poll holds one).")
	flag.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", o.MaxConcurrentReconciles, "Reconcile workers.")
	flag.StringVar(&namespaces, "namespaces", "", "Comma-separated namespaces to serve (empty: all); the manager's cache lists and watches only there.")
	flag.BoolVar(&clusterProviders, "cluster-approval-providers", true, "Watch and use ClusterApprovalProviders. false: the manager neither lists nor watches them (no cluster-scoped RBAC for them), a Tool naming one is not Ready and its calls end Rejected (ClusterProvidersOff); the chart sets it with scope.namespaces.")
	flag.BoolVar(&o.LeaderElection, "leader-elect", false, "Enable leader election (on in the Deployment).")
	flag.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8443", "Metrics address; 0 disables.")
	flag.BoolVar(&o.MetricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to callers the apiserver authorizes (false: plain HTTP).")
	flag.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "Directory with the metrics endpoint's TLS certificate and key (tls.crt, tls.key, read again when they change), for scrapers that verify it; empty: a self-signed certificate made at start. Only with --metrics-secure.")
	flag.StringVar(&o.PprofBindAddress, "pprof-bind-address", "", "Serve Go's pprof profiles on this address (empty: off).")
	flag.StringVar(&o.ReceiverBindAddress, "receiver-bind-address", "0", "Serve the AAP webhook receiver (asynchronous mode, for provider objects with spec.delivery) over HTTPS on this address, at "+controllers.ReceiverPath+" (\"0\": off).")
	flag.StringVar(&o.ReceiverCertDir, "receiver-cert-dir", "/tmp/toolgate-receiver-certs", "Directory with the receiver's TLS certificate and key (tls.crt, tls.key), read again when they change.")
	flag.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "Health probe address.")
	o.MCP.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	for _, err := range []error{checkPollWait(o.PollWait), controllers.CheckFinishedCallTTL(o.FinishedCallTTL)} {
		if err != nil {
			log.Error(err, "invalid configuration")
			os.Exit(2)
		}
	}
	if namespaces != "" {
		o.Namespaces = strings.Split(namespaces, ",")
	}
	o.ClusterProvidersOff = !clusterProviders
	if providerURL != "" {
		client, err := provider.NewHTTPClient(provider.Options{
			BaseURL: providerURL, CredentialFile: credentialFile, CAFile: caFile, MaxConnsPerHost: providerMaxConns,
			OnAttempt: controllers.CountProviderRequest, OnError: controllers.CountProviderError,
		})
		if err != nil {
			log.Error(err, "invalid provider configuration")
			os.Exit(2)
		}
		o.Provider = client
	}
	o.Timing = timing
	mgr, err := controllers.NewManager(ctrl.GetConfigOrDie(), o)
	if err != nil {
		log.Error(err, "unable to set up the manager")
		os.Exit(1)
	}
	log.Info("starting manager", "provider", providerURL, "pollWait", o.PollWait, "namespaces", o.Namespaces, "clusterApprovalProviders", !o.ClusterProvidersOff, "finishedToolCallTTL", o.FinishedCallTTL)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped with an error")
		os.Exit(1)
	}
}

// checkPollWait refuses a --poll-wait under a second or over AAP's cap on a long poll's wait.
func checkPollWait(d time.Duration) error {
	if d < time.Second || d > provider.MaxLongPollWait {
		return fmt.Errorf("--poll-wait %s: use a wait between 1s and %s (AAP caps a long poll's wait at %s)", d, provider.MaxLongPollWait, provider.MaxLongPollWait)
	}
	return nil
}
