package main

import (
	"reflect"
	"testing"
)

func TestSplitRuleKeepsQuotedComments(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`-A INPUT -j KUBE-FIREWALL`, []string{"-A", "INPUT", "-j", "KUBE-FIREWALL"}},
		{`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
			[]string{"-A", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}},
		{`-A X -m comment --comment "a \"quoted\" word" -j KUBE-Y`,
			[]string{"-A", "X", "-m", "comment", "--comment", `a "quoted" word`, "-j", "KUBE-Y"}},
		{`-A X -m comment --comment "" -j KUBE-Y`, []string{"-A", "X", "-m", "comment", "--comment", "", "-j", "KUBE-Y"}},
	} {
		if got := splitRule(tc.line); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitRule(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/a\040b/c\134d`); got != `/a b/c\d` {
		t.Errorf("unescapeMount = %q", got)
	}
}
