package lifecycle

import "testing"

func TestExactInCanonicalForm(t *testing.T) {
	cases := []struct {
		n    string
		want bool
	}{
		{"0", true},
		{"-0", true},
		{"4900", true},
		{"-4900", true},
		{"0.1", true},
		{"1.5e3", true},
		{"1E+2", true},
		{"1.0", true},
		{"100e-2", true},
		{"9007199254740992", true},  // 2^53
		{"9007199254740993", false}, // 2^53 + 1 reads back as 2^53
		{"-9007199254740993", false},
		{"12345678901234567890", false},
		{"0.10000000000000000555", false},
		{"1e400", false},  // beyond a double
		{"1e-400", false}, // rounds to 0
		{"0e-99999999", true},
		{"1e99999999999999999999", false},
		{"5e-324", true}, // the smallest double
	}
	for _, c := range cases {
		if got := ExactInCanonicalForm(c.n); got != c.want {
			t.Errorf("ExactInCanonicalForm(%s) = %v, want %v", c.n, got, c.want)
		}
	}
}

func TestInexactNumber(t *testing.T) {
	cases := []struct {
		raw, pointer, number string
	}{
		{`{"amount":4900,"currency":"GBP"}`, "", ""},
		{`{"amount":9007199254740993}`, "/amount", "9007199254740993"},
		{`{"b":{"x/y":[1,2,18446744073709551617]},"a":1}`, "/b/x~1y/2", "18446744073709551617"},
		{`{"z":12345678901234567890,"a":{"m~":0.10000000000000000555}}`, "/a/m~0", "0.10000000000000000555"},
		{`{"s":"9007199254740993"}`, "", ""}, // a string is carried as written
		{`not json`, "", ""},
	}
	for _, c := range cases {
		p, n := InexactNumber([]byte(c.raw))
		if p != c.pointer || n != c.number {
			t.Errorf("InexactNumber(%s) = %q, %q; want %q, %q", c.raw, p, n, c.pointer, c.number)
		}
	}
}
