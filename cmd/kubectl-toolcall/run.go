package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/pkg/toolcall"
)

const runSynopsis = "kubectl toolcall run TOOL --args JSON --waiting-limit DURATION [--timeout DURATION] [--reason TEXT] [--name NAME] [-l KEY=VALUE]..."

// run creates a ToolCall and waits for its outcome.
func (c *cli) run(ctx context.Context, args []string) int {
	fs := c.flags("run")
	argsJSON := fs.String("args", "", "The tool's arguments as a JSON object, e.g. '{\"payment_id\":\"p_1\",\"amount\":4900}'. Required unless --args-file is given.")
	argsFile := fs.String("args-file", "", "Read the arguments (a JSON object) from this file instead of --args.")
	waitingLimit := fs.Duration("waiting-limit", 0, "Required. How long you will wait in total, from creation to the result, e.g. 2m or 1h30m.")
	timeout := fs.Duration("timeout", 0, "The approval timeout requested from the provider; default: the largest that fits in the waiting limit.")
	reason := fs.String("reason", "", "Why the call is made, in the caller's words (at most 4 KiB); approvers see it as the caller's claim.")
	name := fs.String("name", "", "The ToolCall's name; default: generated from the tool's name.")
	labels := fs.StringArrayP("label", "l", nil, "A label KEY=VALUE to put on the ToolCall; repeatable.")
	help, err := c.parse("run", fs, args, runSynopsis)
	if help {
		return exitSucceeded
	}
	if err != nil {
		return c.fail(err)
	}

	pos := fs.Args()
	switch {
	case len(pos) == 0:
		return c.fail(usagef("run", "TOOL is required: name the toolName of a Tool, e.g. kubectl toolcall run issue_refund --args '{...}' --waiting-limit 2m"))
	case len(pos) > 1:
		return c.fail(usagef("run", "run takes one TOOL, got %d arguments (%s): quote the --args JSON", len(pos), strings.Join(pos, " ")))
	}
	tool := pos[0]
	if *waitingLimit <= 0 {
		if fs.Changed("waiting-limit") {
			return c.fail(usagef("run", "--waiting-limit must be a positive duration such as 90s, 2m or 1h30m, got %v", *waitingLimit))
		}
		return c.fail(usagef("run", "--waiting-limit is required: how long you will wait in total, e.g. --waiting-limit 2m"))
	}
	if *timeout < 0 || (fs.Changed("timeout") && *timeout == 0) {
		return c.fail(usagef("run", "--timeout must be a positive duration such as 60s, got %v; leave it out to let Toolgate choose", *timeout))
	}
	if len(*reason) > tg.MaxReasonBytes {
		return c.fail(usagef("run", "--reason is %d bytes: shorten it to at most %d bytes (4 KiB)", len(*reason), tg.MaxReasonBytes))
	}
	raw, err := readArgs(*argsJSON, *argsFile, fs.Changed("args"), fs.Changed("args-file"))
	if err != nil {
		return c.fail(err)
	}
	lbls, err := parseLabels(*labels)
	if err != nil {
		return c.fail(err)
	}

	cl, ns, err := c.connect()
	if err != nil {
		return c.fail(err)
	}
	tc := toolcall.New(cl, ns)
	l := newLive(c.stderr, isTerminal(c.stderr))
	defer l.stop()
	res, err := tc.Call(ctx, tool, json.RawMessage(raw), *waitingLimit, toolcall.Options{
		Timeout: *timeout, Reason: *reason, Name: *name, Labels: lbls, Progress: l.update,
	})
	l.stop()
	return c.report(ctx, res, err, ns, false)
}

func readArgs(inline, file string, inlineSet, fileSet bool) ([]byte, error) {
	var raw []byte
	flag := "--args"
	switch {
	case inlineSet && fileSet:
		return nil, usagef("run", "--args and --args-file are mutually exclusive: give the arguments once")
	case fileSet:
		flag = "--args-file"
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usagef("run", "--args-file: %v", err)
		}
		raw = b
	case inlineSet:
		raw = []byte(inline)
	default:
		return nil, usagef("run", "--args is required: the tool's arguments as a JSON object, e.g. --args '{\"amount\":4900}' (or --args '{}')")
	}
	out, err := toolcall.Arguments(json.RawMessage(raw))
	if err != nil {
		return nil, usagef("run", "%s: %s", flag, strings.TrimPrefix(err.Error(), "toolcall: "))
	}
	return out, nil
}

func parseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("run", "--label %q: use KEY=VALUE, e.g. --label agent=billing-bot", kv)
		}
		m[k] = v
	}
	return m, nil
}

const waitSynopsis = "kubectl toolcall wait NAME [--delete-on-interrupt]"

// wait attaches to an existing ToolCall.
func (c *cli) wait(ctx context.Context, args []string) int {
	fs := c.flags("wait")
	deleteOnInterrupt := fs.Bool("delete-on-interrupt", false, "On Ctrl-C or SIGTERM, delete the ToolCall (as run does) instead of leaving it.")
	help, err := c.parse("wait", fs, args, waitSynopsis)
	if help {
		return exitSucceeded
	}
	if err != nil {
		return c.fail(err)
	}
	if len(fs.Args()) != 1 {
		return c.fail(usagef("wait", "wait takes exactly one NAME, got %d arguments", len(fs.Args())))
	}
	name := fs.Args()[0]
	cl, ns, err := c.connect()
	if err != nil {
		return c.fail(err)
	}
	tc := toolcall.New(cl, ns)
	l := newLive(c.stderr, isTerminal(c.stderr))
	defer l.stop()
	res, err := tc.Wait(ctx, name, l.update)
	l.stop()
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Interrupted: the ToolCall goes on unless asked otherwise.
		ab := &toolcall.AbandonedError{Name: name, Namespace: ns, Err: ctx.Err()}
		if res != nil && res.ToolCall != nil {
			ab.Phase = res.ToolCall.Status.Phase
		}
		if !*deleteOnInterrupt {
			fmt.Fprintf(c.stderr, "interrupted: stopped waiting; toolcall %s is left as it is (%s). To cancel it: kubectl delete toolcalls.toolgate.dev %s -n %s\n",
				name, ab.Phase.OrPending(), name, ns)
			return exitInterrupted
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), toolcall.DeleteTimeout)
		defer cancel()
		if derr := tc.Delete(dctx, name); derr != nil {
			ab.DeleteErr = derr
		} else {
			ab.Deleted = true
		}
		err = ab
	}
	return c.report(ctx, res, err, ns, true)
}

// report prints the outcome of run or wait and returns the exit code.
func (c *cli) report(ctx context.Context, res *toolcall.Result, err error, ns string, attached bool) int {
	if err == nil {
		fmt.Fprintf(c.stderr, "toolcall %s: %s", res.Name, tg.PhaseSucceeded)
		if res.JobName != "" {
			fmt.Fprintf(c.stderr, " (job %s)", res.JobName)
		}
		fmt.Fprintln(c.stderr)
		if out := res.Output; out != "" {
			fmt.Fprint(c.stdout, out)
			if !strings.HasSuffix(out, "\n") {
				fmt.Fprintln(c.stdout)
			}
		}
		return exitSucceeded
	}
	var te *toolcall.Error
	if errors.As(err, &te) {
		explain(c.stderr, te, res)
		return exitCodeOf(te.Phase)
	}
	var ab *toolcall.AbandonedError
	if errors.As(err, &ab) {
		if !ab.Deleted {
			fmt.Fprintf(c.stderr, "interrupted, but deleting toolcall %s failed: %v\nDelete it to cancel its approval request: kubectl delete toolcalls.toolgate.dev %s -n %s\n", ab.Name, ab.DeleteErr, ab.Name, ns)
			return exitError
		}
		what := "Toolgate cancels its approval request"
		if ab.Phase == tg.PhaseRunning {
			what = "its Job is deleted with it"
		}
		fmt.Fprintf(c.stderr, "interrupted: deleted toolcall %s (it was %s); %s.\n", ab.Name, ab.Phase.OrPending(), what)
		return exitInterrupted
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) && !attached {
		fmt.Fprintf(c.stderr, "interrupted while creating the ToolCall; if it was created all the same, delete it to cancel it (kubectl toolcall get -n %s lists them).\n", ns)
		return exitInterrupted
	}
	return c.fail(err)
}

func exitCodeOf(p tg.ToolCallPhase) int {
	switch p {
	case tg.PhaseFailed:
		return exitFailed
	case tg.PhaseDenied:
		return exitDenied
	case tg.PhaseExpired:
		return exitExpired
	case tg.PhaseApprovalUnavailable:
		return exitApprovalUnavailable
	case tg.PhaseCancelled:
		return exitCancelled
	case tg.PhaseRejected:
		return exitRejected
	}
	return exitError
}

// explain writes why a ToolCall did not succeed.
func explain(w io.Writer, e *toolcall.Error, res *toolcall.Result) {
	fmt.Fprintf(w, "toolcall %s: %s\n", e.Name, e.Phase)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "  %-15s%s\n", k+":", indentRest(v, 17))
		}
	}
	line("reason", e.Reason)
	line("message", e.Message)
	if e.Phase == tg.PhaseDenied || e.Note != "" {
		note := e.Note
		if note == "" {
			note = "(none)"
		}
		line("approver note", note)
	}
	if res != nil {
		line("job", res.JobName)
		line("result", res.Output)
	}
}

func indentRest(s string, n int) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+strings.Repeat(" ", n))
}

// live shows a ToolCall's progress on stderr: on a terminal one line redrawn in place (with the
// time left ticking), elsewhere one line per phase change.
type live struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	now      func() time.Time
	last     *tg.ToolCall
	printed  tg.ToolCallPhase // non-TTY: the phase of the last line
	width    int              // TTY: length of the line on screen
	stopped  bool
	stopTick chan struct{}
}

func newLive(w io.Writer, tty bool) *live {
	l := &live{w: w, tty: tty, now: time.Now, stopTick: make(chan struct{})}
	if tty {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-l.stopTick:
					return
				case <-t.C:
					l.mu.Lock()
					if !l.stopped && l.last != nil {
						l.draw()
					}
					l.mu.Unlock()
				}
			}
		}()
	}
	return l
}

// update is the Progress callback. The terminal phase is left to report, which explains it.
func (l *live) update(tc *tg.ToolCall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || tc.Status.Phase.IsTerminal() {
		return
	}
	first := l.last == nil
	l.last = tc
	if l.tty {
		l.draw()
		return
	}
	if p := tc.Status.Phase.OrPending(); first || p != l.printed {
		l.printed = p
		fmt.Fprintf(l.w, "toolcall %s: %s\n", tc.Name, strings.Join(liveParts(tc, l.now()), ", "))
	}
}

func (l *live) draw() {
	line := fmt.Sprintf("toolcall %s: %s", l.last.Name, strings.Join(liveParts(l.last, l.now()), "  "))
	pad := ""
	if n := l.width - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(l.w, "\r%s%s", line, pad)
	l.width = len(line)
}

// stop ends the live output, erasing the live line. It may be called more than once.
func (l *live) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.stopped = true
	close(l.stopTick)
	if l.tty && l.width > 0 {
		fmt.Fprintf(l.w, "\r%s\r", strings.Repeat(" ", l.width))
	}
}

// liveParts describes where a ToolCall is: its phase, the time left in the waiting limit, the
// provider's deadline while a decision is awaited, and the Job once there is one.
func liveParts(tc *tg.ToolCall, now time.Time) []string {
	phase := string(tc.Status.Phase.OrPending())
	if r := tc.Status.Reason; r != "" && phase == string(tg.PhasePending) {
		phase += " (" + r + ")" // e.g. SubmitFailed: the provider cannot be reached yet
	}
	parts := []string{phase}
	terminal := tc.Status.Phase.IsTerminal()
	if !terminal && !tc.CreationTimestamp.IsZero() {
		limit := tc.Spec.WaitingLimit.Duration
		if left := tc.CreationTimestamp.Add(limit).Sub(now); left > 0 {
			parts = append(parts, fmt.Sprintf("%s left of the %s waiting limit", shortDuration(left), shortDuration(limit)))
		} else {
			parts = append(parts, fmt.Sprintf("the %s waiting limit has passed", shortDuration(limit)))
		}
	}
	if d := tc.Status.DeadlineAt; d != nil && !terminal && tc.Status.Phase != tg.PhaseRunning {
		if left := d.Sub(now); left > 0 {
			parts = append(parts, fmt.Sprintf("provider deadline in %s (%s)", shortDuration(left), d.Local().Format(time.TimeOnly)))
		} else {
			parts = append(parts, fmt.Sprintf("provider deadline passed (%s)", d.Local().Format(time.TimeOnly)))
		}
	}
	if d := tc.Status.Decision; d != nil && d.Source == tg.DecisionSourcePolicy {
		parts = append(parts, d.Status+" by rule "+d.Rule)
	}
	if tc.Status.JobName != "" {
		parts = append(parts, "job "+tc.Status.JobName)
	}
	return parts
}

// shortDuration rounds to seconds and drops zero units as the provider's timeouts are written: 2m,
// 1m32s, 1h5m.
func shortDuration(d time.Duration) string {
	if d = d.Round(time.Second); d < time.Second {
		return "<1s"
	}
	s := d.String()
	// time.Duration renders 2m as "2m0s" and 1h5m as "1h5m0s": drop the zero units.
	for _, suffix := range []string{"m0s", "h0m"} {
		if len(s) > len(suffix) && strings.HasSuffix(s, suffix) {
			s = s[:len(s)-len(suffix)+1]
		}
	}
	return s
}
