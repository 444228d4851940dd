// Command kubectl-toolcall is a kubectl plugin for Toolgate ToolCalls: run a tool behind a human
// approval and wait for its outcome, attach to a ToolCall, list and describe ToolCalls, and export and
// verify their signed receipts.
//
// Build it onto the PATH and kubectl finds it:
//
//	go build -o ~/bin/kubectl-toolcall ./cmd/kubectl-toolcall
//	kubectl toolcall --help
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolgate.dev/toolgate/pkg/toolcall"
)

// Exit codes. run and wait report the ToolCall's outcome; get and describe use 0, 1 and 2 only.
const (
	exitSucceeded           = 0
	exitError               = 1
	exitUsage               = 2
	exitFailed              = 3
	exitDenied              = 4
	exitExpired             = 5
	exitApprovalUnavailable = 6
	exitCancelled           = 7
	exitRejected            = 8
	exitInterrupted         = 130
)

const exitCodesHelp = `Exit codes (run and wait):
  0    Succeeded: the tool ran; its result is on stdout
  1    any other error: the API server could not be reached or refused a request, the ToolCall was
       deleted by someone else, or deleting it after an interrupt failed
  2    usage error: unknown subcommand or flag, missing or invalid flag value
  3    Failed: the tool ran and failed; its termination message is on stderr
  4    Denied: a human denied the call; the approver's note is on stderr
  5    Expired: approved, but the approval had expired when the tool was about to start
  6    ApprovalUnavailable: no valid decision within the waiting limit (never a denial)
  7    Cancelled: the approval request was cancelled at the provider
  8    Rejected: bad input caught before asking a human (unknown tool, arguments, timeout)
  130  interrupted (Ctrl-C or SIGTERM): run deleted the ToolCall, so Toolgate cancels its request;
       wait left it as it is (or deleted it with --delete-on-interrupt)
get, describe and receipt exit 0 on success, 1 on errors and 2 on usage errors; verify exits 0 when
every check passed, 1 when one failed or on errors, 2 on usage errors.
`

const mainHelp = `kubectl toolcall: run tools behind a human approval with Toolgate.

Usage:
  kubectl toolcall run TOOL --args JSON --waiting-limit DURATION [--timeout DURATION] [--name NAME] [-l KEY=VALUE]...
      Create a ToolCall, show its progress on stderr, print the tool's result on stdout.
  kubectl toolcall wait NAME [--delete-on-interrupt]
      Attach to an existing ToolCall; same output and exit codes as run.
  kubectl toolcall get [NAME] [-o wide|json|yaml|name] [-A] [-l SELECTOR]
      List ToolCalls (NAME TOOL PHASE READY DECISION JOB AGE).
  kubectl toolcall describe NAME
      Describe a ToolCall: spec, phase, reason and message, decision and note, deadline, job, result, conditions.
  kubectl toolcall receipt NAME [--arguments FILE] [--result FILE]
      Print an ended ToolCall's signed receipt (a DSSE envelope), as cosign verify-blob-attestation reads it;
      write the canonical arguments and the result it binds to FILEs.
  kubectl toolcall verify NAME --key FILE [--key FILE]... [--chain [--receipts FILE]]
      Verify a ToolCall's receipt: its signature, what it binds, and the live Job, Pod and Tool it names;
      with --chain, every receipt of the namespace and their chain.

Run "kubectl toolcall SUBCOMMAND --help" for a subcommand's flags.

`

// isTerminal reports whether w is a terminal, where run and wait redraw one live line.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one ends the plugin at once.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

// cli is one invocation.
type cli struct {
	stdout, stderr io.Writer
	// cfg, when set, is used instead of the kubeconfig (tests).
	cfg *rest.Config

	kubeconfig string
	overrides  clientcmd.ConfigOverrides
	global     *pflag.FlagSet
}

// usageError is a mistake in the command line.
type usageError struct {
	cmd string
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd, format string, a ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, a...)}
}

// run executes the plugin with args (without the program name) and returns the exit code. ctx ends
// on Ctrl-C or SIGTERM. A non-nil cfg replaces the kubeconfig.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, cfg *rest.Config) int {
	c := &cli{stdout: stdout, stderr: stderr, cfg: cfg}
	c.global = pflag.NewFlagSet("kubectl toolcall", pflag.ContinueOnError)
	c.global.SetOutput(io.Discard)
	c.global.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file to use for CLI requests.")
	clientcmd.BindOverrideFlags(&c.overrides, c.global, clientcmd.RecommendedConfigOverrideFlags(""))
	// Flags before the subcommand are the connection flags; the subcommand parses the rest.
	c.global.SetInterspersed(false)
	if err := c.global.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			c.mainHelp(stdout)
			return exitSucceeded
		}
		return c.fail(usagef("", "%v", err))
	}
	rest := c.global.Args()
	if len(rest) == 0 {
		return c.fail(usagef("", "a subcommand is required: run, wait, get, describe, receipt or verify"))
	}
	var err error
	switch rest[0] {
	case "run":
		return c.run(ctx, rest[1:])
	case "wait":
		return c.wait(ctx, rest[1:])
	case "get":
		err = c.get(ctx, rest[1:])
	case "describe":
		err = c.describe(ctx, rest[1:])
	case "receipt":
		err = c.receipt(ctx, rest[1:])
	case "verify":
		err = c.verify(ctx, rest[1:])
	case "help":
		c.mainHelp(stdout)
		return exitSucceeded
	default:
		err = usagef("", "unknown subcommand %q: use run, wait, get, describe, receipt or verify", rest[0])
	}
	return c.fail(err)
}

func (c *cli) mainHelp(w io.Writer) {
	fmt.Fprint(w, mainHelp)
	fmt.Fprint(w, exitCodesHelp)
	fmt.Fprintf(w, "\nConnection flags (as kubectl's; before or after the subcommand):\n%s", c.global.FlagUsages())
}

// fail prints err and returns its exit code (0 for nil).
func (c *cli) fail(err error) int {
	if err == nil {
		return exitSucceeded
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(c.stderr, "error: %s\n", ue.msg)
		if ue.cmd != "" {
			fmt.Fprintf(c.stderr, "See 'kubectl toolcall %s --help' for usage.\n", ue.cmd)
		} else {
			fmt.Fprintln(c.stderr, "See 'kubectl toolcall --help' for usage.")
		}
		return exitUsage
	}
	fmt.Fprintf(c.stderr, "error: %s\n", strings.TrimPrefix(err.Error(), "toolcall: "))
	return exitError
}

// flags returns a subcommand's flag set; parse adds the connection flags to it.
func (c *cli) flags(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("kubectl toolcall "+name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses a subcommand's arguments. It returns help=true when --help was asked for (the help
// is printed).
func (c *cli) parse(name string, fs *pflag.FlagSet, args []string, synopsis string) (help bool, err error) {
	own := fs.FlagUsages()
	fs.AddFlagSet(c.global)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(c.stdout, "Usage:\n  %s\n\nFlags:\n%s\nConnection flags: --kubeconfig, --context, -n/--namespace and kubectl's others (kubectl toolcall --help).\n", synopsis, own)
			if name == "run" || name == "wait" {
				fmt.Fprintf(c.stdout, "\n%s", exitCodesHelp)
			}
			if name == "verify" {
				fmt.Fprintf(c.stdout, "\n%s", verifyExitHelp)
			}
			return true, nil
		}
		return false, usagef(name, "%v", err)
	}
	return false, nil
}

// scheme holds the toolgate.dev types, and the Jobs and Pods verify reads.
func scheme() *runtime.Scheme {
	s := toolcall.Scheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // only on a programming error
	}
	return s
}

// connect returns a client and the namespace to work in: -n, else the kubeconfig context's.
func (c *cli) connect() (client.WithWatch, string, error) {
	cfg, ns := c.cfg, c.overrides.Context.Namespace
	if cfg == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = c.kubeconfig
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &c.overrides)
		var err error
		if cfg, err = cc.ClientConfig(); err != nil {
			return nil, "", fmt.Errorf("loading the kubeconfig (set --kubeconfig or KUBECONFIG): %w", err)
		}
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("reading the namespace from the kubeconfig (or pass -n): %w", err)
		}
	}
	if ns == "" {
		ns = "default"
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "kubectl-toolcall"
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme()})
	if err != nil {
		return nil, "", fmt.Errorf("connecting to %s: %w", cfg.Host, err)
	}
	return cl, ns, nil
}
