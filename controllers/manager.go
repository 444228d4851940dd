package controllers

import (
	"cmp"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/approvalproviders"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/controllers/internal/toolcache"
	"toolgate.dev/toolgate/controllers/mcpservers"
	"toolgate.dev/toolgate/controllers/receiver"
	"toolgate.dev/toolgate/controllers/toolcalls"
	"toolgate.dev/toolgate/controllers/toolcalls/waiter"
	"toolgate.dev/toolgate/controllers/tools"
	"toolgate.dev/toolgate/internal/policy"
	"toolgate.dev/toolgate/internal/provider"
)

// Options configure a Toolgate manager.
type Options struct {
	// Provider is the manager's own provider (its flags), which calls use when no ApprovalProvider or
	// ClusterApprovalProvider applies; nil when none is configured.
	Provider provider.Client
	// ClusterResourceNamespace holds the Secrets and ConfigMaps that ClusterApprovalProviders name.
	ClusterResourceNamespace string
	PollWait                 time.Duration
	Clock                    clock.PassiveClock
	Timing                   Timing
	CallTimeout              time.Duration
	CancelGiveUp             time.Duration
	// FinishedCallTTL is how long a finished ToolCall is kept, counted from when it finished, when its
	// Tool sets no spec.finishedCallTTL; 0 (the default) keeps finished ToolCalls forever.
	FinishedCallTTL         time.Duration
	MaxConcurrentReconciles int

	// Namespaces limits the manager to these namespaces (all when empty): its cache lists and watches
	// only there.
	Namespaces []string
	// ClusterProvidersOff: the manager neither watches, lists nor uses ClusterApprovalProviders, so
	// that a namespace-scoped manager needs no cluster-scoped RBAC for them; a Tool naming one is not
	// Ready and its calls end Rejected (ClusterProvidersOff).
	ClusterProvidersOff bool

	LeaderElection          bool
	LeaderElectionNamespace string
	MetricsBindAddress      string
	// MetricsSecure serves metrics over HTTPS, allowing only callers authorized by the apiserver.
	MetricsSecure bool
	// MetricsCertDir holds the metrics endpoint's certificate and key (tls.crt, tls.key, read again
	// when they change), so that a scraper can verify it. Empty: a self-signed certificate made at
	// start. Only with MetricsSecure.
	MetricsCertDir         string
	HealthProbeBindAddress string
	// PprofBindAddress serves net/http/pprof (empty or "0": off).
	PprofBindAddress string
	// ReceiverBindAddress serves the AAP webhook receiver (asynchronous mode) over HTTPS at
	// ReceiverPath (empty or "0": off), with the certificate and key in ReceiverCertDir (tls.crt,
	// tls.key).
	ReceiverBindAddress string
	ReceiverCertDir     string
	// MCP bounds what the MCPServer controller reads from MCP servers and how often it lists one
	// (zero fields: mcpserver's defaults).
	MCP mcpservers.Options
	// ReceiptKeySecret is the Secret, in the manager's namespace, with the key receipts are signed
	// with (made when missing).
	ReceiptKeySecret string
}

// DefaultOptions are the manager's defaults, the one place they are set: the manager's flags start
// from them, and NewManager fills every option left zero from them.
func DefaultOptions() Options {
	return Options{
		PollWait:                 provider.DefaultLongPollWait,
		Clock:                    clock.RealClock{},
		Timing:                   DefaultTiming(),
		CallTimeout:              15 * time.Second,
		CancelGiveUp:             2 * time.Minute,
		MaxConcurrentReconciles:  32,
		ClusterResourceNamespace: "toolgate-system",
		ReceiptKeySecret:         toolcalls.ReceiptKeySecret,
	}
}

// withDefaults fills the options left zero from DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.PollWait <= 0 {
		o.PollWait = d.PollWait
	}
	if o.Clock == nil {
		o.Clock = d.Clock
	}
	if o.Timing == (Timing{}) {
		o.Timing = d.Timing
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = d.CallTimeout
	}
	if o.CancelGiveUp <= 0 {
		o.CancelGiveUp = d.CancelGiveUp
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = d.MaxConcurrentReconciles
	}
	if o.ClusterResourceNamespace == "" {
		o.ClusterResourceNamespace = d.ClusterResourceNamespace
	}
	if o.ReceiptKeySecret == "" {
		o.ReceiptKeySecret = d.ReceiptKeySecret
	}
	return o
}

// Scheme is the scheme Toolgate's manager uses.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := tg.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

func metricsOptions(o Options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsBindAddress}
	if o.MetricsSecure {
		m.SecureServing = true
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
		if o.MetricsCertDir != "" {
			m.CertDir, m.CertName, m.KeyName = o.MetricsCertDir, "tls.crt", "tls.key"
		}
	}
	return m
}

// NewManager builds the manager: controller-runtime's, with ManagerOptions, its apiserver writes
// counted (toolgate_apiserver_writes_total), and Toolgate's controllers added by Setup.
func NewManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(countWrites)
	mgr, err := ctrl.NewManager(cfg, ManagerOptions(o))
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := Setup(mgr, o); err != nil {
		return nil, err
	}
	return mgr, nil
}

// ManagerOptions are controller-runtime's options for Toolgate's manager: its scheme, its cache
// (only the Jobs Toolgate created and their Pods, without managed fields), metrics, probes and leader
// election.
func ManagerOptions(o Options) ctrl.Options {
	o = o.withDefaults()
	// Only Jobs that Toolgate created, and their Pods, are cached.
	ours := labels.NewSelector().Add(toolCallUIDExists)
	var namespaces map[string]cache.Config
	if len(o.Namespaces) > 0 {
		namespaces = map[string]cache.Config{}
		for _, ns := range o.Namespaces {
			namespaces[ns] = cache.Config{}
		}
	}
	return ctrl.Options{
		Scheme:                  Scheme(),
		Metrics:                 metricsOptions(o),
		HealthProbeBindAddress:  o.HealthProbeBindAddress,
		PprofBindAddress:        o.PprofBindAddress,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "toolgate.dev",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// The command exits as soon as the manager stops, so the Lease is released for the next
		// replica instead of left to expire.
		LeaderElectionReleaseOnCancel: true,
		MapperProvider:                newRESTMapper,
		// Managed fields are never read: dropping them keeps the cache small at many pending ToolCalls.
		Cache: cache.Options{DefaultNamespaces: namespaces, DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
			&batchv1.Job{}: {Label: ours},
			&corev1.Pod{}:  {Label: ours, Transform: toolcalls.SlimPod},
		}},
	}
}

// toolCallUIDExists selects the objects Toolgate created: they carry the ToolCall's UID.
var toolCallUIDExists = func() labels.Requirement {
	r, err := labels.NewRequirement(tg.LabelToolCallUID, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return *r
}()

// ReceiverPath is where the AAP webhook receiver takes providers' messages.
const ReceiverPath = receiver.Path

// Setup adds Toolgate's controllers to mgr (built with ManagerOptions): the ToolCall controller with
// its long-poll Waiter, the Tool controller, the provider controllers, the webhook receiver when it
// is on, the gauges computed from its cache at each scrape (statemetrics.go), and the health probes.
func Setup(mgr ctrl.Manager, o Options) error {
	o = o.withDefaults()
	derived, err := toolcache.New(policy.DefaultLimits())
	if err != nil {
		return err
	}
	receiverOn := o.ReceiverBindAddress != "" && o.ReceiverBindAddress != "0"
	if err := registerIndexes(mgr, receiverOn, !o.ClusterProvidersOff); err != nil {
		return err
	}
	// cl is the client every controller uses: without ClusterApprovalProviders, one that never reads them.
	cl, kinds := mgr.GetClient(), []string{tg.KindApprovalProvider, tg.KindClusterApprovalProvider}
	if o.ClusterProvidersOff {
		cl, kinds = providercache.WithoutClusterProviders(cl), kinds[:1]
	}
	provs := providercache.New(cl, mgr.GetAPIReader(), o.Provider, o.ClusterResourceNamespace, providerOptions)
	if o.ClusterProvidersOff {
		provs.TurnOffClusterProviders()
	}
	r := &toolcalls.Reconciler{
		Client:                  cl,
		APIReader:               mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorder("toolgate-controller"),
		CallTimeout:             o.CallTimeout,
		Waiter:                  waiter.New(o.PollWait, mgr.GetLogger().WithName("waiter")),
		Elected:                 mgr.Elected(),
		Clock:                   o.Clock,
		Timing:                  o.Timing,
		CancelGiveUp:            o.CancelGiveUp,
		FinishedCallTTL:         o.FinishedCallTTL,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		Providers:               provs,
		Tools:                   derived,
		GoneNamespace:           cmp.Or(o.LeaderElectionNamespace, o.ClusterResourceNamespace),
		Namespaces:              o.Namespaces,
		ExecutionKey: &toolcalls.ExecutionKey{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
			Namespace: cmp.Or(o.LeaderElectionNamespace, o.ClusterResourceNamespace)},
		Receipts: &toolcalls.Receipts{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
			Namespace: cmp.Or(o.LeaderElectionNamespace, o.ClusterResourceNamespace), FlagsProviderURL: baseURLOf(o.Provider),
			Key: &toolcalls.ReceiptKey{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Clock: o.Clock,
				Namespace: cmp.Or(o.LeaderElectionNamespace, o.ClusterResourceNamespace), Name: o.ReceiptKeySecret}},
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the ToolCall controller: %w", err)
	}
	toolController := &tools.Reconciler{Client: cl, Recorder: mgr.GetEventRecorder("toolgate-controller"), Tools: derived,
		ClusterProvidersOff: o.ClusterProvidersOff}
	if err := toolController.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the Tool controller: %w", err)
	}
	mc := &mcpservers.Reconciler{Client: cl, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("toolgate-controller"), Options: o.MCP}
	if err := mc.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the MCPServer controller: %w", err)
	}
	for _, kind := range kinds {
		pr := &approvalproviders.Reconciler{Client: cl, Recorder: mgr.GetEventRecorder("toolgate-controller"),
			Clock: o.Clock, Kind: kind, Providers: provs}
		if err := pr.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the %s controller: %w", kind, err)
		}
	}
	if receiverOn {
		rc := &receiver.Receiver{Cache: cl, Client: cl, APIReader: mgr.GetAPIReader(), Clock: o.Clock,
			Log: mgr.GetLogger().WithName("receiver"), Providers: provs, HandOver: r.HandOver}
		if err := mgr.Add(receiver.NewServer(o.ReceiverBindAddress, o.ReceiverCertDir, rc, rc.Log, mgr.GetCache().WaitForCacheSync)); err != nil {
			return err
		}
	}
	var cache client.Reader = mgr.GetCache()
	if o.ClusterProvidersOff {
		cache = cl
	}
	gauges := &stateMetrics{src: &stateSource{cache: cache, clock: o.Clock, log: mgr.GetLogger().WithName("metrics")},
		sync: mgr.GetCache().WaitForCacheSync}
	if err := mgr.Add(gauges); err != nil {
		return err
	}
	if o.HealthProbeBindAddress != "" && o.HealthProbeBindAddress != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return err
		}
	}
	return nil
}

// Timing holds the margins that place a ToolCall's approval and execution inside its waiting limit;
// Window is one ToolCall's timing. Both are the lifecycle package's, under the names the manager's
// options use.
type (
	Timing = lifecycle.Timing
	Window = lifecycle.Window
)

// DefaultTiming returns the default margins.
func DefaultTiming() Timing { return lifecycle.DefaultTiming() }

// CheckFinishedCallTTL refuses an Options.FinishedCallTTL (--finished-toolcall-ttl) that is negative
// or shorter than a minute; 0 keeps finished ToolCalls forever.
func CheckFinishedCallTTL(ttl time.Duration) error { return lifecycle.CheckFinishedCallTTL(ttl) }

// baseURLOf is the URL of the manager's own provider, which receipts name; "" when it has none.
func baseURLOf(c provider.Client) string {
	if u, ok := c.(interface{ BaseURL() string }); ok {
		return u.BaseURL()
	}
	return ""
}
