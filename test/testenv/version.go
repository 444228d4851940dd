package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The Kubernetes versions Toolgate supports: the three newest upstream minors. make test runs every
// suite on the newest and the admission and install suites again on the oldest
// (hack/build-envtest-assets.sh builds either, KUBE_VERSION chooses).
const (
	OldestKubernetesMinor = 35
	NewestKubernetesMinor = 37
)

// mutatingAdmissionPolicyV1Minor is the first minor that serves MutatingAdmissionPolicy as
// admissionregistration.k8s.io/v1, on by default. 1.35 serves v1beta1, off by default.
const mutatingAdmissionPolicyV1Minor = 36

// AssetsDir is the directory of the kube-apiserver and etcd envtest runs: KUBEBUILDER_ASSETS when set,
// otherwise the newest version in the cache hack/build-envtest-assets.sh builds.
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	matches, _ := filepath.Glob(filepath.Join(CacheDir(), "k8s", "*", "kube-apiserver"))
	if len(matches) == 0 {
		return "", fmt.Errorf("no kube-apiserver: set KUBEBUILDER_ASSETS or run hack/build-envtest-assets.sh (make test does)")
	}
	newest, newestMinor := "", -1
	for _, m := range matches {
		if _, minor, err := parseVersion(filepath.Base(filepath.Dir(m))); err == nil && minor > newestMinor {
			newest, newestMinor = filepath.Dir(m), minor
		}
	}
	if newest == "" {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return newest, nil
}

var versionPattern = regexp.MustCompile(`v?(1)\.([0-9]+)\.[0-9]+`)

func parseVersion(s string) (string, int, error) {
	m := versionPattern.FindStringSubmatch(s)
	if m == nil {
		return "", 0, fmt.Errorf("no Kubernetes version in %q", s)
	}
	minor, err := strconv.Atoi(m[2])
	return strings.TrimPrefix(m[0], "v"), minor, err
}

// APIServerVersion is the version of the kube-apiserver in dir, as it reports it (e.g. "1.35.4"), and
// its minor.
func APIServerVersion(dir string) (string, int, error) {
	out, err := exec.Command(filepath.Join(dir, "kube-apiserver"), "--version").Output()
	if err != nil {
		return "", 0, fmt.Errorf("%s/kube-apiserver --version: %w", dir, err)
	}
	return parseVersion(string(out))
}

// mutatingAdmissionPolicy sets the apiserver's flags so that it serves MutatingAdmissionPolicy (on,
// as Toolgate needs it: on 1.35 the v1beta1 API and its feature gate, which the cluster's operator
// turns on) or does not serve it at all (off: a cluster that cannot record who asked).
func mutatingAdmissionPolicy(env *envtest.Environment, dir string, on bool) error {
	_, minor, err := APIServerVersion(dir)
	if err != nil {
		return err
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	switch {
	case on && minor < mutatingAdmissionPolicyV1Minor:
		args.Append("runtime-config", "admissionregistration.k8s.io/v1beta1=true")
		args.Append("feature-gates", "MutatingAdmissionPolicy=true")
	case !on && minor < mutatingAdmissionPolicyV1Minor:
		// off by default
	case !on:
		// The admission plugin waits for the API it reads; without the API it goes too.
		args.Append("runtime-config", "admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false,admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false")
		args.Append("disable-admission-plugins", "MutatingAdmissionPolicy")
	}
	return nil
}

// StartAPIServer starts kube-apiserver and etcd alone, without the CRDs and the admission policies,
// for a test that installs Toolgate itself. mutatingAdmissionPolicy says whether the apiserver
// serves MutatingAdmissionPolicy (on 1.35 the v1beta1 API turned on) or not at all.
func StartAPIServer(mutatingAdmissionPolicyOn bool) (*envtest.Environment, error) {
	dir, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	if err := mutatingAdmissionPolicy(env, dir, mutatingAdmissionPolicyOn); err != nil {
		return nil, err
	}
	if _, err := env.Start(); err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	return env, nil
}
