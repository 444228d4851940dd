package testharness

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/zap/zapcore"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Main is the TestMain of a package whose tests share one control plane:
//
//	var env *testharness.Env
//
//	func TestMain(m *testing.M) { testharness.Main(m, &env) }
//
// It parses the flags unless TestMain already has. Fuzzing and listing (-test.fuzz, -test.fuzzworker,
// -test.list) need no cluster, and each fuzz worker is a process of its own that would start one: then
// Main only runs the tests, and *env stays nil. Otherwise it sets the controller-runtime logger (errors
// only, everything when TOOLGATE_TEST_VERBOSE is set), starts the control plane into *env, runs each
// setup on it in order, runs the tests and stops the control plane.
//
// If the control plane does not start or a setup fails, Main prints the error, stops the control plane
// and exits with status 1 without running any test. Otherwise it returns, and the test binary exits
// with the tests' status once TestMain returns (as the testing package does for a TestMain that
// returns), so TestMain can clean up after Main.
func Main(m *testing.M, env **Env, setup ...func(*Env) error) {
	if !flag.Parsed() {
		flag.Parse()
	}
	if fuzzingOrListing() {
		m.Run()
		return
	}
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(testLogLevel())))
	e, err := StartEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*env = e
	for _, s := range setup {
		if err := s(e); err != nil {
			fmt.Fprintln(os.Stderr, err)
			_ = e.Stop()
			os.Exit(1)
		}
	}
	m.Run()
	_ = e.Stop()
}

// fuzzingOrListing reports whether the test binary runs fuzz targets or only lists tests.
func fuzzingOrListing() bool {
	for _, name := range []string{"test.fuzz", "test.fuzzworker", "test.list"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}

// testLogLevel is the level of the tests' controller-runtime logger: debug when TOOLGATE_TEST_VERBOSE
// is set, errors otherwise.
func testLogLevel() zapcore.Level {
	if os.Getenv("TOOLGATE_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}
