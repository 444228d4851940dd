// Command cluster runs a single-node Kubernetes cluster from real components on this machine, as
// root, for `make dev` and the e2e suite (hack/cluster.sh starts and stops it): etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, containerd with runc and the CNI bridge plugin, kubelet and
// kube-proxy (iptables mode, so Pods reach the apiserver through the `kubernetes` Service).
//
//	cluster up --dir .cluster --assets ~/.cache/toolgate/k8s/1.37.2-linux-amd64   # runs until SIGTERM
//	cluster cleanup --dir .cluster   # undoes what an `up` that died left behind
//
// Everything it writes lives under --dir: certificates, kubeconfigs (kubeconfig is the admin's),
// containerd's and kubelet's state, CNI state, logs (logs/<component>.log). Outside it, it changes only
// what a node needs, and undoes each on stop: the bridge toolgate0 (10.244.0.1/24, the node's IP and
// the apiserver's address), kube-proxy's iptables rules, one FORWARD rule that keeps Pod traffic on
// this machine, net.ipv4.ip_forward, the network namespaces of its Pods, and the kubepods cgroups.
//
// `up` writes <dir>/ready once the node is Ready, or <dir>/failed with the reason. A component that
// exits on its own stops the whole cluster, and the reason names the component and its log.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// The node's network. The bridge address is the node IP, where kube-apiserver and the kubelet listen;
// Pods get addresses from the rest of podCIDR and reach the apiserver through kubernetesServiceIP.
const (
	nodeName            = "toolgate-node"
	bridgeName          = "toolgate0"
	bridgeIP            = "10.244.0.1"
	podCIDR             = "10.244.0.0/24"
	serviceCIDR         = "10.96.0.0/24"
	kubernetesServiceIP = "10.96.0.1"
	apiserverPort       = 6443
	kubeletPort         = 10250
	// The pause image hack/cluster.sh builds and imports; containerd's sandbox_image.
	defaultPauseImage = "localhost/toolgate/pause:3.10"
)

func main() {
	log.SetFlags(log.LstdFlags)
	log.SetPrefix("cluster: ")
	if len(os.Args) < 2 {
		log.Fatal("usage: cluster up|cleanup --dir DIR [--assets DIR]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", ".cluster", "state directory: everything the cluster writes lives here")
	assets := fs.String("assets", "", "directory holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy (up)")
	pause := fs.String("pause-image", defaultPauseImage, "containerd's sandbox_image (up)")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long `up` waits for each component to be ready")
	_ = fs.Parse(os.Args[2:])
	abs, err := filepath.Abs(*dir)
	if err != nil {
		log.Fatal(err)
	}
	c := &cluster{dir: abs, assets: *assets, pauseImage: *pause, timeout: *timeout}
	switch os.Args[1] {
	case "up":
		if c.assets == "" {
			log.Fatal("--assets is required")
		}
		err = c.up()
	case "cleanup":
		err = c.cleanup()
	default:
		err = fmt.Errorf("unknown command %q: want up or cleanup", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
}

type cluster struct {
	dir, assets, pauseImage string
	timeout                 time.Duration
	procs                   []*proc // in start order
	etcdClientPort          int
}

func (c *cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.dir}, elem...)...)
}

// up starts every component, writes the ready file, and runs until SIGINT/SIGTERM or until a component
// exits; then it stops everything and cleans up.
func (c *cluster) up() (err error) {
	if os.Geteuid() != 0 {
		return errors.New("the cluster needs root: containerd, kubelet and kube-proxy manage mounts, namespaces, cgroups and iptables")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, f := range []string{"ready", "failed"} {
		_ = os.Remove(c.path(f))
	}
	if err := os.MkdirAll(c.path("logs"), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(c.path("cluster.pid"), fmt.Appendf(nil, "%d\n", os.Getpid()), 0o600); err != nil {
		return err
	}
	defer func() {
		log.Print("stopping")
		if cerr := c.stopAll(); cerr != nil {
			log.Printf("cleanup: %v", cerr)
		}
		_ = os.Remove(c.path("cluster.pid"))
		_ = os.Remove(c.path("ready"))
		if err != nil {
			_ = os.WriteFile(c.path("failed"), []byte(err.Error()+"\n"), 0o600)
		}
	}()

	exited := make(chan *proc, 16)
	steps := []struct {
		name string
		fn   func(context.Context, chan<- *proc) error
	}{
		{"certificates and kubeconfigs", func(context.Context, chan<- *proc) error { return c.writePKI() }},
		{"node network", func(context.Context, chan<- *proc) error { return c.setupNetwork() }},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"kube-controller-manager", c.startControllerManager},
		{"kube-scheduler", c.startScheduler},
		{"containerd", c.startContainerd},
		{"kubelet", c.startKubelet},
		{"kube-proxy", c.startKubeProxy},
		{"node Ready", c.waitNodeReady},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(ctx, exited); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		log.Printf("%s ready in %s", s.name, time.Since(start).Round(100*time.Millisecond))
	}
	if err := os.WriteFile(c.path("ready"), []byte(c.apiserverURL()+"\n"), 0o600); err != nil {
		return err
	}
	log.Printf("cluster ready: kubeconfig %s", c.path("kubeconfig"))
	select {
	case <-ctx.Done():
		return nil
	case p := <-exited:
		return p.exitError()
	}
}

func (c *cluster) apiserverURL() string { return fmt.Sprintf("https://%s:%d", bridgeIP, apiserverPort) }
