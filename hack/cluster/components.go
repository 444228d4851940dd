package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func (c *cluster) bin(name string) string { return filepath.Join(c.assets, name) }

// freePort returns a TCP port on 127.0.0.1 that is free now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func httpOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func (c *cluster) startEtcd(ctx context.Context, exited chan<- *proc) error {
	client, err := freePort()
	if err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	c.etcdClientPort = client
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	p, err := c.start("etcd", exited, c.bin("etcd"),
		"--name=toolgate", "--data-dir="+c.path("etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=toolgate="+peerURL, "--unsafe-no-fsync")
	if err != nil {
		return err
	}
	return c.waitFor(ctx, p, "etcd", func(ctx context.Context) error { return httpOK(ctx, clientURL+"/health") })
}

func (c *cluster) startAPIServer(ctx context.Context, exited chan<- *proc) error {
	pki := func(f string) string { return c.path("pki", f) }
	p, err := c.start("kube-apiserver", exited, c.bin("kube-apiserver"),
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.etcdClientPort),
		"--bind-address="+bridgeIP, "--advertise-address="+bridgeIP, "--secure-port="+strconv.Itoa(apiserverPort),
		"--cert-dir="+c.path("pki"),
		"--tls-cert-file="+pki("apiserver.crt"), "--tls-private-key-file="+pki("apiserver.key"),
		"--client-ca-file="+pki("ca.crt"),
		"--service-cluster-ip-range="+serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction", // on top of the default plugins, ServiceAccount among them
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki("sa.pub"), "--service-account-signing-key-file="+pki("sa.key"),
		"--kubelet-client-certificate="+pki("apiserver-kubelet-client.crt"), "--kubelet-client-key="+pki("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority="+pki("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP", // the node's IP: its name resolves nowhere
		"--allow-privileged=false",
		"--profiling=false",
		"--event-ttl=1h")
	if err != nil {
		return err
	}
	cs, err := c.clientset("kubeconfig")
	if err != nil {
		return err
	}
	return c.waitFor(ctx, p, "kube-apiserver", func(ctx context.Context) error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

func (c *cluster) clientset(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.path(kubeconfig))
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

func (c *cluster) startControllerManager(ctx context.Context, exited chan<- *proc) error {
	pki := func(f string) string { return c.path("pki", f) }
	// All controllers enabled by default: node lifecycle (removes the not-ready taint), ServiceAccount
	// and token (Pods get their tokens), root CA publisher, Job, garbage collector, ...
	_, err := c.start("kube-controller-manager", exited, c.bin("kube-controller-manager"),
		"--kubeconfig="+c.path("kubeconfig-kube-controller-manager"),
		"--controllers=*",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+pki("sa.key"),
		"--root-ca-file="+pki("ca.crt"),
		"--cluster-signing-cert-file="+pki("ca.crt"), "--cluster-signing-key-file="+pki("ca.key"),
		"--leader-elect=false",
		"--secure-port=0")
	return err
}

func (c *cluster) startScheduler(ctx context.Context, exited chan<- *proc) error {
	_, err := c.start("kube-scheduler", exited, c.bin("kube-scheduler"),
		"--kubeconfig="+c.path("kubeconfig-kube-scheduler"),
		"--authentication-kubeconfig="+c.path("kubeconfig-kube-scheduler"),
		"--authorization-kubeconfig="+c.path("kubeconfig-kube-scheduler"),
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0")
	return err
}

func (c *cluster) containerdSocket() string { return c.path("containerd", "containerd.sock") }

func (c *cluster) startContainerd(ctx context.Context, exited chan<- *proc) error {
	if err := c.writeContainerdConfig(); err != nil {
		return err
	}
	p, err := c.start("containerd", exited, "/usr/bin/containerd", "--config", c.path("containerd", "config.toml"))
	if err != nil {
		return err
	}
	return c.waitFor(ctx, p, "containerd", c.criReady)
}

// criReady asks containerd's CRI plugin for its version.
func (c *cluster) criReady(ctx context.Context) error {
	rt, closeConn, err := c.cri()
	if err != nil {
		return err
	}
	defer closeConn()
	_, err = rt.Version(ctx, &runtimeapi.VersionRequest{})
	return err
}

func (c *cluster) cri() (runtimeapi.RuntimeServiceClient, func(), error) {
	if _, err := os.Stat(c.containerdSocket()); err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient("unix://"+c.containerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return runtimeapi.NewRuntimeServiceClient(conn), func() { _ = conn.Close() }, nil
}

func (c *cluster) writeContainerdConfig() error {
	for _, d := range []string{"containerd", "cni/net.d"} {
		if err := os.MkdirAll(c.path(d), 0o700); err != nil {
			return err
		}
	}
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  # This host refuses lowering oom_score_adj: without this every sandbox fails to start.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
`, c.path("containerd", "root"), c.path("containerd", "state"), c.containerdSocket(), c.containerdSocket()+".ttrpc",
		c.path("containerd", "opt"), c.pauseImage, c.path("cni", "net.d"))
	if err := os.WriteFile(c.path("containerd", "config.toml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	// One bridge for all Pods; host-local hands out podCIDR. No ipMasq: Pod traffic is not NATed out
	// of the machine (see setupNetwork's FORWARD rule).
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "toolgate",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    }
  ]
}
`, bridgeName, podCIDR, bridgeIP, c.path("cni", "ipam"))
	return os.WriteFile(c.path("cni", "net.d", "10-toolgate.conflist"), []byte(cni), 0o600)
}

func (c *cluster) startKubelet(ctx context.Context, exited chan<- *proc) error {
	healthz, err := freePort()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.path("kubelet"), 0o700); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This kernel mounts cgroup v1 with a v2 "unified" hierarchy beside it.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%[1]s
address: %[2]s
port: %[3]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[4]d
podLogsDir: %[5]q
tlsCertFile: %[6]q
tlsPrivateKeyFile: %[7]q
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[8]q
authorization:
  mode: Webhook
failSwapOn: false
# A development node: never evict or garbage-collect the images imported here (they cannot be pulled).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
serializeImagePulls: false
registerNode: true
`, c.containerdSocket(), bridgeIP, kubeletPort, healthz, c.path("pod-logs"),
		c.path("pki", "kubelet-serving.crt"), c.path("pki", "kubelet-serving.key"), c.path("pki", "ca.crt"))
	if err := os.WriteFile(c.path("kubelet", "config.yaml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	p, err := c.start("kubelet", exited, c.bin("kubelet"),
		"--config="+c.path("kubelet", "config.yaml"),
		"--kubeconfig="+c.path("kubeconfig-kubelet"),
		"--root-dir="+c.path("kubelet", "root"),
		"--cert-dir="+c.path("kubelet", "pki"),
		"--hostname-override="+nodeName,
		"--node-ip="+bridgeIP)
	if err != nil {
		return err
	}
	return c.waitFor(ctx, p, "kubelet", func(ctx context.Context) error {
		return httpOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", healthz))
	})
}

func (c *cluster) startKubeProxy(ctx context.Context, exited chan<- *proc) error {
	healthz, err := freePort()
	if err != nil {
		return err
	}
	metrics, err := freePort()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.path("kube-proxy"), 0o700); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %q
mode: iptables
clusterCIDR: %q
hostnameOverride: %q
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
# NodePorts only on the bridge: nothing is exposed on this machine's other interfaces.
nodePortAddresses: [%q]
conntrack:
  # Leave the host's conntrack settings as they are.
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, c.path("kubeconfig-kube-proxy"), podCIDR, nodeName, healthz, metrics, podCIDR)
	if err := os.WriteFile(c.path("kube-proxy", "config.yaml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	p, err := c.start("kube-proxy", exited, c.bin("kube-proxy"), "--config="+c.path("kube-proxy", "config.yaml"))
	if err != nil {
		return err
	}
	return c.waitFor(ctx, p, "kube-proxy", func(ctx context.Context) error {
		return httpOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", healthz))
	})
}

// waitNodeReady waits for the node to be Ready without the not-ready taint, and for the default
// ServiceAccount, so a Pod created next is scheduled and gets its token.
func (c *cluster) waitNodeReady(ctx context.Context, _ chan<- *proc) error {
	cs, err := c.clientset("kubeconfig")
	if err != nil {
		return err
	}
	return c.waitFor(ctx, nil, "node "+nodeName, func(ctx context.Context) error {
		for _, p := range c.procs {
			if p.exited() {
				return p.exitError()
			}
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status != corev1.ConditionTrue {
					return fmt.Errorf("node not Ready: %s", cond.Message)
				}
				ready = true
			}
		}
		if !ready {
			return fmt.Errorf("node has no Ready condition yet")
		}
		for _, t := range node.Spec.Taints {
			return fmt.Errorf("node has taint %s", t.Key)
		}
		_, err = cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}
