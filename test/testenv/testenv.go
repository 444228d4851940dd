// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest) with the
// Toolgate CRDs and admission policies installed. The binaries come from KUBEBUILDER_ASSETS when set, otherwise from the
// cache hack/build-envtest-assets.sh builds into ($TOOLGATE_CACHE, default ~/.cache/toolgate).
package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Start starts the control plane and installs the CRDs and the admission policies of config/admission
// (who may call which tool, who asked, spec never changes), as a cluster that runs Toolgate has them. envtest's
// kube-apiserver runs the default admission plugins (envtest only disables ServiceAccount), among them
// ValidatingAdmissionPolicy and MutatingAdmissionPolicy, both GA and on by default since 1.36; on
// 1.35 Start turns MutatingAdmissionPolicy's v1beta1 API on, as a cluster that runs Toolgate there
// must (KUBEBUILDER_ASSETS, or KUBE_VERSION for hack/build-envtest-assets.sh, chooses the version).
// Each configure function may change the environment (e.g. etcd's or the apiserver's flags) before
// it starts.
func Start(configure ...func(*envtest.Environment)) (*envtest.Environment, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	dir, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	env.BinaryAssetsDirectory = dir
	if err := mutatingAdmissionPolicy(env, dir, true); err != nil {
		return nil, err
	}
	for _, c := range configure {
		c(env)
	}
	if _, err := env.Start(); err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	if err := InstallAdmission(env.Config); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return env, nil
}

// RepoRoot walks up from the working directory to the directory holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// CacheDir is where hack/build-envtest-assets.sh caches what it builds: $TOOLGATE_CACHE, else
// $XDG_CACHE_HOME/toolgate, else ~/.cache/toolgate.
func CacheDir() string {
	if dir := os.Getenv("TOOLGATE_CACHE"); dir != "" {
		return dir
	}
	if dir := os.Getenv("XDG_CACHE_HOME"); dir != "" {
		return filepath.Join(dir, "toolgate")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "toolgate")
}
