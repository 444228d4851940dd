package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// now is the clock get and describe show ages and deadlines against.
var now = time.Now

const getSynopsis = "kubectl toolcall get [NAME] [-o wide|json|yaml|name] [-A] [-l SELECTOR]"

func (c *cli) get(ctx context.Context, args []string) error {
	fs := c.flags("get")
	output := fs.StringP("output", "o", "", "Output format: wide, json, yaml or name; default: a table.")
	all := fs.BoolP("all-namespaces", "A", false, "List ToolCalls in all namespaces.")
	selector := fs.StringP("selector", "l", "", "Label selector, e.g. -l agent=billing-bot.")
	help, err := c.parse("get", fs, args, getSynopsis)
	if help || err != nil {
		return err
	}
	switch *output {
	case "", "wide", "json", "yaml", "name":
	default:
		return usagef("get", "--output (-o) %q is not supported: use wide, json, yaml or name", *output)
	}
	pos := fs.Args()
	if len(pos) > 1 {
		return usagef("get", "get takes at most one NAME, got %d arguments", len(pos))
	}
	if len(pos) == 1 && (*all || *selector != "") {
		return usagef("get", "a NAME cannot be combined with --all-namespaces (-A) or --selector (-l)")
	}
	var sel labels.Selector
	if *selector != "" {
		if sel, err = labels.Parse(*selector); err != nil {
			return usagef("get", "--selector (-l) %q: %v", *selector, err)
		}
	}
	cl, ns, err := c.connect()
	if err != nil {
		return err
	}

	var items []tg.ToolCall
	single := len(pos) == 1
	if single {
		tc := &tg.ToolCall{}
		if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: pos[0]}, tc); err != nil {
			return notFound(err, pos[0], ns)
		}
		items = []tg.ToolCall{*tc}
	} else {
		list := &tg.ToolCallList{}
		opts := []client.ListOption{}
		if !*all {
			opts = append(opts, client.InNamespace(ns))
		}
		if sel != nil {
			opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
		}
		if err := cl.List(ctx, list, opts...); err != nil {
			return fmt.Errorf("listing ToolCalls: %w", err)
		}
		items = list.Items
	}
	for i := range items {
		items[i].SetGroupVersionKind(tg.GroupVersion.WithKind("ToolCall"))
		items[i].ManagedFields = nil
	}

	switch *output {
	case "json", "yaml":
		var v any = &items[0]
		if !single {
			v = map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}, "items": items}
		}
		return encode(c.stdout, v, *output)
	case "name":
		for _, tc := range items {
			fmt.Fprintf(c.stdout, "toolcall.toolgate.dev/%s\n", tc.Name)
		}
		return nil
	}
	if len(items) == 0 {
		if *all {
			fmt.Fprintln(c.stderr, "No resources found")
		} else {
			fmt.Fprintf(c.stderr, "No resources found in %s namespace.\n", ns)
		}
		return nil
	}
	table(c.stdout, items, *all, *output == "wide", now())
	return nil
}

func notFound(err error, name, ns string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("toolcall %q not found in namespace %q: check the name, or pass -n", name, ns)
	}
	return fmt.Errorf("reading toolcall %s/%s: %w", ns, name, err)
}

func encode(w io.Writer, v any, format string) error {
	if format == "yaml" {
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "    ")
	return enc.Encode(v)
}

// table prints ToolCalls with the columns of `kubectl get toolcalls` (the CRD's printer columns):
// NAME TOOL PHASE READY DECISION JOB AGE, and with wide RULE REQUESTER REASON, to which it adds MESSAGE.
func table(w io.Writer, items []tg.ToolCall, withNamespace, wide bool, at time.Time) {
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	cols := []string{"NAME", "TOOL", "PHASE", "READY", "DECISION", "JOB", "AGE"}
	if withNamespace {
		cols = append([]string{"NAMESPACE"}, cols...)
	}
	if wide {
		cols = append(cols, "RULE", "REQUESTER", "REASON", "MESSAGE")
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	for _, tc := range items {
		decision := ""
		if tc.Status.Decision != nil {
			decision = tc.Status.Decision.Status
		}
		ready := ""
		if c := meta.FindStatusCondition(tc.Status.Conditions, tg.ConditionReady); c != nil {
			ready = string(c.Status)
		}
		row := []string{tc.Name, tc.Spec.Tool, orNone(string(tc.Status.Phase)), orNone(ready), orNone(decision), orNone(tc.Status.JobName), age(tc.CreationTimestamp, at)}
		if withNamespace {
			row = append([]string{tc.Namespace}, row...)
		}
		if wide {
			rule := ""
			if tc.Status.Decision != nil {
				rule = tc.Status.Decision.Rule
			}
			requester := ""
			if tc.Spec.Requester != nil {
				requester = tc.Spec.Requester.Username
			}
			row = append(row, orNone(rule), orNone(requester), orNone(tc.Status.Reason), orNone(oneLine(tc.Status.Message)))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func age(t metav1.Time, at time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(at.Sub(t.Time))
}

const describeSynopsis = "kubectl toolcall describe NAME"

func (c *cli) describe(ctx context.Context, args []string) error {
	fs := c.flags("describe")
	help, err := c.parse("describe", fs, args, describeSynopsis)
	if help || err != nil {
		return err
	}
	if len(fs.Args()) != 1 {
		return usagef("describe", "describe takes exactly one NAME, got %d arguments", len(fs.Args()))
	}
	name := fs.Args()[0]
	cl, ns, err := c.connect()
	if err != nil {
		return err
	}
	tc := &tg.ToolCall{}
	if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, tc); err != nil {
		return notFound(err, name, ns)
	}
	describe(c.stdout, tc, now())
	return nil
}

// describe writes a ToolCall for a person to read.
func describe(w io.Writer, tc *tg.ToolCall, at time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	field := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s:\t%s\n", k, fmt.Sprintf(format, a...)) }
	when := func(t *metav1.Time) string {
		if t == nil {
			return "<none>"
		}
		d := t.Sub(at)
		rel := "in " + shortDuration(d)
		if d <= 0 {
			rel = duration.HumanDuration(-d) + " ago"
		}
		return fmt.Sprintf("%s (%s)", t.UTC().Format(time.RFC3339), rel)
	}

	field("Name", "%s", tc.Name)
	field("Namespace", "%s", tc.Namespace)
	field("Labels", "%s", labels.FormatLabels(tc.Labels))
	field("Created", "%s", when(&tc.CreationTimestamp))
	if tc.DeletionTimestamp != nil {
		field("Deleting since", "%s", when(tc.DeletionTimestamp))
	}
	field("Tool", "%s", tc.Spec.Tool)
	field("Requested by", "%s", requestedBy(tc.Spec.Requester))
	limit := tc.Spec.WaitingLimit.Duration
	end := metav1.NewTime(tc.CreationTimestamp.Add(limit))
	field("Waiting limit", "%s, ends %s", shortDuration(limit), when(&end))
	if tc.Spec.Timeout != nil {
		field("Approval timeout", "%s", shortDuration(tc.Spec.Timeout.Duration))
	} else if a := tc.Annotations[tg.AnnotationApprovalTimeout]; a != "" {
		field("Approval timeout", "%s (chosen by Toolgate)", a)
	} else {
		field("Approval timeout", "<chosen by Toolgate>")
	}
	field("Phase", "%s", tc.Status.Phase.OrPending())
	field("Reason", "%s", orNone(tc.Status.Reason))
	field("Message", "%s", orNone(tc.Status.Message))
	field("Request ID", "%s", orNone(tc.Status.RequestID))
	field("Provider deadline", "%s", when(tc.Status.DeadlineAt))
	if d := tc.Status.Decision; d != nil {
		field("Decision", "%s", d.Status)
		field("  Decided by", "%s", decidedBy(d))
		field("  Note", "%s", orNone(d.Note))
		field("  Decided at", "%s", when(d.DecidedAt))
		if d.ExpiresAt != nil {
			field("  Expires at", "%s", when(d.ExpiresAt))
		}
	} else {
		field("Decision", "<none>")
	}
	field("Job", "%s", orNone(tc.Status.JobName))
	_ = tw.Flush()

	fmt.Fprintln(w, "Arguments:")
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, tc.Spec.Arguments.Raw, "  ", "  "); err == nil {
		fmt.Fprintf(w, "  %s\n", pretty.String())
	} else {
		fmt.Fprintf(w, "  %s\n", tc.Spec.Arguments.Raw)
	}
	if tc.Status.Result != "" {
		fmt.Fprintln(w, "Result:")
		for _, l := range strings.Split(strings.TrimRight(tc.Status.Result, "\n"), "\n") {
			fmt.Fprintf(w, "  %s\n", l)
		}
	} else {
		fmt.Fprintln(w, "Result:  <none>")
	}
	if len(tc.Status.Conditions) == 0 {
		fmt.Fprintln(w, "Conditions:  <none>")
		return
	}
	fmt.Fprintln(w, "Conditions:")
	ct := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(ct, "  TYPE\tSTATUS\tREASON\tAGE\tMESSAGE")
	for _, cond := range tc.Status.Conditions {
		fmt.Fprintf(ct, "  %s\t%s\t%s\t%s\t%s\n", cond.Type, cond.Status, cond.Reason, age(cond.LastTransitionTime, at), oneLine(cond.Message))
	}
	_ = ct.Flush()
}

// requestedBy names who created the ToolCall, as the admission policy recorded them.
func requestedBy(r *tg.Requester) string {
	if r == nil {
		return "<not recorded: the toolgate-toolcall-requester admission policy was not installed when it was created>"
	}
	s := r.Username
	if r.UID != "" {
		s += " (uid " + r.UID + ")"
	}
	if len(r.Groups) > 0 {
		s += ", groups " + strings.Join(r.Groups, ", ")
	}
	return s
}

// decidedBy says who decided: the approvals provider, or the Tool's approval rule.
func decidedBy(d *tg.Decision) string {
	if d.Source == tg.DecisionSourcePolicy {
		return fmt.Sprintf("rule %s of the Tool's spec.approval (no human was asked)", d.Rule)
	}
	return "the approvals provider"
}
