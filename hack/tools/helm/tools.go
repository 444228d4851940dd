//go:build tools

// Package tools pins the Helm command line (bin/helm) that the local cluster installs the chart with
// and the documentation's commands run: the same release of Helm as the SDK the tests use. A module
// of its own, so that its dependencies never move controller-gen's or the project's.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
