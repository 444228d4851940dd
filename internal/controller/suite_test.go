package controller_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/zap/zapcore"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	th "toolgate.dev/toolgate/internal/testharness"
)

// env is the control plane every scenario of this package shares; each scenario has its own
// namespace, reference provider and manager (internal/testharness).
var env *th.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if fuzzingOrListing() {
		// Fuzz targets and -list need no cluster; fuzz workers are separate processes, and each would
		// start its own.
		os.Exit(m.Run())
	}
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapLevel())))
	var err error
	env, err = th.StartEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func fuzzingOrListing() bool {
	for _, name := range []string{"test.fuzz", "test.fuzzworker", "test.list"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}

func zapLevel() zapcore.Level {
	if os.Getenv("TOOLGATE_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}
