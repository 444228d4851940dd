package apivalidation_test

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// column is a printer column as the apiserver's Table gives it: kubectl get shows the priority 0
// columns, -o wide all of them, in this order.
type column struct {
	Name     string
	Priority int32
}

// serverTable lists a resource as `kubectl get` asks for it: a Table, whose columns and cells the
// apiserver computes from the CRD's additionalPrinterColumns.
func serverTable(g Gomega, path string) *metav1.Table {
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	raw, err := dc.RESTClient().Get().AbsPath(path).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	g.Expect(err).NotTo(HaveOccurred(), "GET %s as a Table: %s", path, raw)
	table := &metav1.Table{}
	g.Expect(json.Unmarshal(raw, table)).To(Succeed())
	return table
}

func columnsOf(table *metav1.Table) []column {
	var cols []column
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, column{c.Name, c.Priority})
	}
	return cols
}

// What `kubectl get` and `kubectl get -o wide` show for each kind: the name, what the object is
// about, whether it is ready, its age; the wide columns after the age, as the built-in kinds do.
func TestPrinterColumns(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		path    string
		columns []column
	}{
		{"/apis/toolgate.dev/v1alpha1/namespaces/" + ns + "/tools", []column{
			{"Name", 0}, {"Tool Name", 0}, {"Ready", 0}, {"Age", 0}, {"Reason", 1}, {"Rules Ready", 1}, {"Execution Timeout", 1}, {"Provider", 1},
		}},
		{"/apis/toolgate.dev/v1alpha1/namespaces/" + ns + "/toolcalls", []column{
			{"Name", 0}, {"Tool", 0}, {"Phase", 0}, {"Ready", 0}, {"Decision", 0}, {"Job", 0}, {"Age", 0},
			{"Rule", 1}, {"Requester", 1}, {"Reason", 1},
		}},
		{"/apis/toolgate.dev/v1alpha1/namespaces/" + ns + "/approvalproviders", []column{
			{"Name", 0}, {"URL", 0}, {"Ready", 0}, {"Reason", 0}, {"Age", 0}, {"Instance", 1},
		}},
		{"/apis/toolgate.dev/v1alpha1/clusterapprovalproviders", []column{
			{"Name", 0}, {"URL", 0}, {"Ready", 0}, {"Reason", 0}, {"Age", 0}, {"Instance", 1},
		}},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(columnsOf(serverTable(g, c.path))).To(Equal(c.columns))
		})
	}
}

// The cells of a ToolCall's row come from the status the manager writes: Ready is the Ready
// condition's status, Rule the approval rule that decided.
func TestToolCallRowShowsReadyAndTheDecision(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	tc := validToolCall(ns, "refund")
	g.Expect(k8s.Create(ctx, tc)).To(Succeed())
	g.Expect(tc.Spec.Requester).NotTo(BeNil(), "the requester admission policy records who created it")
	tc.Status = tg.ToolCallStatus{
		Phase:    tg.PhaseSucceeded,
		Decision: &tg.Decision{Status: "approved", Source: tg.DecisionSourcePolicy, Rule: "small-refunds"},
		JobName:  "refund-3f9a0c1d2e",
		Reason:   tg.ReasonJobSucceeded,
		Conditions: []metav1.Condition{{
			Type: tg.ConditionReady, Status: metav1.ConditionTrue, Reason: tg.ReasonJobSucceeded,
			Message: "The tool ran.", LastTransitionTime: metav1.Now(),
		}},
	}
	g.Expect(k8s.Status().Update(ctx, tc)).To(Succeed())

	table := serverTable(g, "/apis/toolgate.dev/v1alpha1/namespaces/"+ns+"/toolcalls")
	g.Expect(table.Rows).To(HaveLen(1))
	cells := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cells[c.Name] = table.Rows[0].Cells[i]
	}
	g.Expect(cells).To(And(
		HaveKeyWithValue("Name", "refund"),
		HaveKeyWithValue("Tool", "issue_refund"),
		HaveKeyWithValue("Phase", "Succeeded"),
		HaveKeyWithValue("Ready", "True"),
		HaveKeyWithValue("Decision", "approved"),
		HaveKeyWithValue("Job", "refund-3f9a0c1d2e"),
		HaveKeyWithValue("Rule", "small-refunds"),
		HaveKeyWithValue("Requester", tc.Spec.Requester.Username),
		HaveKeyWithValue("Reason", tg.ReasonJobSucceeded),
		HaveKeyWithValue("Age", Not(BeNil())),
	))
}

// `kubectl get tcall` lists ToolCalls, and no short name of Toolgate's is a name or short name of a
// resource the apiserver serves itself, where kubectl would take whichever
// of the two discovery lists first.
// (`tc` is not used: ToolHive, an MCP operator that may run beside Toolgate's MCP gateway, gives it
// to MCPToolConfig.)
func TestShortNames(t *testing.T) {
	g := NewWithT(t)
	want := map[string][]string{
		"toolcalls.toolgate.dev":                {"tcall"},
		"tools.toolgate.dev":                    nil,
		"approvalproviders.toolgate.dev":        {"aprov"},
		"clusterapprovalproviders.toolgate.dev": {"caprov"},
	}
	ours := map[string]string{}
	for name, short := range want {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: name}, crd)).To(Succeed())
		g.Expect(crd.Spec.Names.ShortNames).To(Equal(short), name)
		for _, s := range short {
			ours[s] = name
		}
	}

	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	lists, err := dc.ServerPreferredResources()
	g.Expect(err).NotTo(HaveOccurred())
	seen := 0
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		g.Expect(err).NotTo(HaveOccurred())
		if gv.Group == tg.GroupVersion.Group {
			continue
		}
		for _, r := range list.APIResources {
			seen++
			for _, n := range append([]string{r.Name, r.SingularName}, r.ShortNames...) {
				g.Expect(ours).NotTo(HaveKey(n), "%s of %s is also a name of %s in %s", n, ours[n], r.Name, list.GroupVersion)
			}
		}
	}
	g.Expect(seen).To(BeNumerically(">", 40), "discovery lists the built-in resources")
}
