package lifecycle

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// InexactNumber finds the first number in the JSON document raw that its RFC 8785 canonical form does
// not keep exactly, and returns its JSON pointer and its text ("" when every number is exact, or raw
// is not JSON). RFC 8785 writes numbers as IEEE 754 doubles: two integers beyond 2^53 that differ can
// canonicalise equal, and a number with more digits than a double holds is shown rounded. The
// approval is compared, and an approver's page shows numbers, in that form, while the tool receives
// the text as written, so a number that form changes is refused before anyone is asked. Object keys
// are visited in sorted order, so the same document always names the same number.
func InexactNumber(raw []byte) (pointer, number string) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", ""
	}
	return inexact(v, "")
}

func inexact(v any, at string) (string, string) {
	switch t := v.(type) {
	case json.Number:
		if !ExactInCanonicalForm(string(t)) {
			if at == "" {
				at = "/"
			}
			return at, string(t)
		}
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if p, n := inexact(t[k], at+"/"+escapePointer(k)); p != "" {
				return p, n
			}
		}
	case []any:
		for i, e := range t {
			if p, n := inexact(e, at+"/"+strconv.Itoa(i)); p != "" {
				return p, n
			}
		}
	}
	return "", ""
}

// escapePointer escapes a key as one reference token of a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}

// ExactInCanonicalForm reports whether the JSON number text n has the same value as the IEEE 754
// double that RFC 8785 writes for it. The comparison is of decimal digits, so no number however long
// or whatever its exponent costs more than its own length.
func ExactInCanonicalForm(n string) bool {
	f, err := strconv.ParseFloat(n, 64)
	if err != nil {
		return false // beyond the range of a double
	}
	want, ok := decimalOf(n)
	if !ok {
		return false
	}
	got, _ := decimalOf(strconv.FormatFloat(f, 'g', -1, 64))
	return want == got
}

// decimal is a number as sign, significant digits without leading or trailing zeros, and the
// exponent of the last of them: 4900 is {false, "49", 2}; zero is {} whatever its sign.
type decimal struct {
	negative bool
	digits   string
	exp      int
}

// decimalOf reads a JSON number (or Go's 'g' format of a double) as a decimal.
func decimalOf(s string) (decimal, bool) {
	var d decimal
	if strings.HasPrefix(s, "-") {
		d.negative, s = true, s[1:]
	}
	mant, expPart, hasExp := strings.Cut(strings.ToLower(s), "e")
	exp := 0
	if hasExp {
		e, err := strconv.Atoi(strings.TrimPrefix(expPart, "+"))
		if err != nil {
			return decimal{}, false
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	exp -= len(frac)
	digits = strings.TrimLeft(digits, "0")
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	if trimmed == "" {
		return decimal{}, true
	}
	d.digits, d.exp = trimmed, exp
	return d, true
}
