//go:build tools

// Package tools pins the build tools the Makefile runs (go build -o ../../bin/...).
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
