package receipt

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// ChainProblem is one break in a namespace's chain of receipts.
type ChainProblem struct {
	Namespace string
	// Sequence is the receipt the problem is found at.
	Sequence int64
	Problem  string
}

func (p ChainProblem) String() string {
	return fmt.Sprintf("namespace %s, receipt %d: %s", p.Namespace, p.Sequence, p.Problem)
}

// CheckChain checks the chains of verified receipts, namespace by namespace: their sequences run
// from the first given without a gap or a repeat, and each receipt names the digest of the one before
// it as chain.previous. A receipt missing (a deleted ToolCall whose receipt was not kept elsewhere, or
// one removed from an export) shows as a gap. It returns the problems in namespace and sequence
// order, none for an unbroken chain. from is the first sequence expected in every namespace (1 for
// the whole history; 0 to start at the lowest receipt given).
func CheckChain(receipts []*Verified, from int64) []ChainProblem {
	byNS := map[string][]*Verified{}
	for _, r := range receipts {
		byNS[r.Predicate.Chain.Namespace] = append(byNS[r.Predicate.Chain.Namespace], r)
	}
	var problems []ChainProblem
	for _, ns := range slices.Sorted(func(yield func(string) bool) {
		for k := range byNS {
			if !yield(k) {
				return
			}
		}
	}) {
		rs := byNS[ns]
		slices.SortStableFunc(rs, func(a, b *Verified) int { return cmp.Compare(a.Predicate.Chain.Sequence, b.Predicate.Chain.Sequence) })
		want := from
		if want <= 0 {
			want = rs[0].Predicate.Chain.Sequence
		}
		// before holds the digests of the sequence before the one being checked (more than one
		// when it forked).
		var before []string
		for i := 0; i < len(rs); {
			seq := rs[i].Predicate.Chain.Sequence
			var here []*Verified
			for ; i < len(rs) && rs[i].Predicate.Chain.Sequence == seq; i++ {
				if !slices.ContainsFunc(here, func(v *Verified) bool { return v.Digest == rs[i].Digest }) {
					here = append(here, rs[i])
				}
			}
			if len(here) > 1 {
				problems = append(problems, ChainProblem{ns, seq, fmt.Sprintf("%d different receipts carry this sequence number (%s and %s): the chain forked", len(here), here[0].Digest, here[1].Digest)})
			}
			for _, r := range here {
				switch prev := r.Predicate.Chain.Previous; {
				case seq > want:
					// The gap is reported once, below.
				case before != nil && !slices.Contains(before, prev):
					problems = append(problems, ChainProblem{ns, seq, fmt.Sprintf("it names %q as the receipt before it, but receipt %d is %s", prev, seq-1, strings.Join(before, " or "))})
				case before == nil && seq == 1 && prev != "":
					problems = append(problems, ChainProblem{ns, seq, "the first receipt names a receipt before it"})
				}
			}
			if seq > want {
				problems = append(problems, ChainProblem{ns, seq, gap(want, seq-1)})
			}
			before = before[:0:0]
			for _, r := range here {
				before = append(before, r.Digest)
			}
			want = seq + 1
		}
	}
	return problems
}

func gap(from, to int64) string {
	if from == to {
		return fmt.Sprintf("receipt %d is missing", from)
	}
	return fmt.Sprintf("receipts %d to %d are missing", from, to)
}
