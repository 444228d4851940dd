// Command cluster runs the local control plane used by `make dev` (hack/dev.sh): etcd and
// kube-apiserver started through controller-runtime's envtest with Toolgate's CRDs installed, plus
// kube-controller-manager running the Job and garbage-collector controllers, so that a Job gets its
// Pod and objects owned by a deleted ToolCall are collected. Everything listens on 127.0.0.1 only.
//
// There is no kubelet, scheduler or container runtime: Pods are created but never run (hack/dev.sh
// sets the Pod status in their place).
//
// It writes an admin kubeconfig (user "dev", group system:masters), then the ready file once
// every component runs, and stops everything on SIGINT or SIGTERM, or when kube-controller-manager
// exits on its own.
//
//	cluster --assets ~/.cache/toolgate/k8s/1.37.2-linux-amd64 --crds config/crd/bases --dir .dev
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	assets := flag.String("assets", "", "directory holding etcd, kube-apiserver and kube-controller-manager (required)")
	crds := flag.String("crds", "config/crd/bases", "directory of CRDs to install")
	dir := flag.String("dir", ".dev", "directory for the kubeconfigs, logs and the ready file")
	flag.Parse()
	log.SetFlags(log.LstdFlags)
	log.SetPrefix("cluster: ")
	if *assets == "" {
		log.Fatal("--assets is required")
	}
	if err := run(*assets, *crds, *dir); err != nil {
		log.Fatal(err)
	}
}

func run(assets, crds, dir string) (err error) {
	kcmPath := filepath.Join(assets, "kube-controller-manager")
	if _, err := os.Stat(kcmPath); err != nil {
		return fmt.Errorf("kube-controller-manager: %w (build it with hack/build-envtest-assets.sh --with-kcm)", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ready := filepath.Join(dir, "cluster.ready")
	_ = os.Remove(ready)
	defer func() { _ = os.Remove(ready) }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	etcdLog, err := openLog(dir, "etcd.log")
	if err != nil {
		return err
	}
	defer func() { _ = etcdLog.Close() }()
	apiLog, err := openLog(dir, "kube-apiserver.log")
	if err != nil {
		return err
	}
	defer func() { _ = apiLog.Close() }()

	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{crds},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Out: etcdLog, Err: etcdLog}
	api := env.ControlPlane.GetAPIServer()
	api.Out, api.Err = apiLog, apiLog
	// Pin both listeners to the IPv4 loopback (envtest picks free ports).
	api.SecureServing.Address = "127.0.0.1"

	log.Printf("starting etcd and kube-apiserver from %s", assets)
	if _, err := env.Start(); err != nil {
		_ = env.Stop()
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		log.Print("stopping kube-apiserver and etcd")
		if stopErr := env.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the control plane: %w", stopErr))
		}
	}()
	log.Printf("kube-apiserver serving on %s, etcd on %s", api.SecureServing.URL("https", ""), env.ControlPlane.Etcd.URL)

	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(env, envtest.User{Name: "dev", Groups: []string{"system:masters"}}, kubeconfig); err != nil {
		return err
	}
	kcmKubeconfig := filepath.Join(dir, "kube-controller-manager.kubeconfig")
	if err := writeKubeconfig(env, envtest.User{Name: "system:kube-controller-manager", Groups: []string{"system:masters"}}, kcmKubeconfig); err != nil {
		return err
	}
	log.Printf("wrote %s (user dev, group system:masters)", kubeconfig)

	kcmLog, err := openLog(dir, "kube-controller-manager.log")
	if err != nil {
		return err
	}
	defer func() { _ = kcmLog.Close() }()
	kcm := exec.Command(kcmPath,
		"--kubeconfig="+kcmKubeconfig,
		// Jobs get Pods; objects whose owner is gone are collected.
		"--controllers=job-controller,garbage-collector-controller",
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		// No HTTPS endpoint (nothing to probe here); nothing listens.
		"--secure-port=0",
		"--bind-address=127.0.0.1",
		"--v=1",
	)
	kcm.Stdout, kcm.Stderr = kcmLog, kcmLog
	kcm.SysProcAttr = sysProcAttr()
	if err := kcm.Start(); err != nil {
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	kcmDone := make(chan error, 1)
	go func() { kcmDone <- kcm.Wait() }()
	defer func() {
		if kcm.ProcessState != nil {
			return
		}
		log.Print("stopping kube-controller-manager")
		_ = kcm.Process.Signal(syscall.SIGTERM)
		select {
		case <-kcmDone:
		case <-time.After(10 * time.Second):
			_ = kcm.Process.Kill()
			<-kcmDone
		}
	}()
	// kube-controller-manager fails fast on bad flags or an unusable kubeconfig.
	select {
	case err := <-kcmDone:
		return fmt.Errorf("kube-controller-manager exited at start (%v); see %s", err, kcmLog.Name())
	case <-ctx.Done():
		return nil
	case <-time.After(2 * time.Second):
	}
	log.Printf("kube-controller-manager running (job-controller, garbage-collector-controller), pid %d", kcm.Process.Pid)

	if err := os.WriteFile(ready, []byte(api.SecureServing.URL("https", "").String()+"\n"), 0o600); err != nil {
		return err
	}
	log.Print("ready")

	select {
	case <-ctx.Done():
		log.Print("shutting down")
		return nil
	case err := <-kcmDone:
		return fmt.Errorf("kube-controller-manager exited (%v); see %s", err, kcmLog.Name())
	}
}

func writeKubeconfig(env *envtest.Environment, user envtest.User, path string) error {
	u, err := env.AddUser(user, nil)
	if err != nil {
		return fmt.Errorf("adding user %s: %w", user.Name, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig of user %s: %w", user.Name, err)
	}
	return os.WriteFile(path, data, 0o600)
}

func openLog(dir, name string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
}
