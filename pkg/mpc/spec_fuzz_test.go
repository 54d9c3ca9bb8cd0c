package mpc

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseControllerSpec: any input either parses into a spec that passes
// Validate, or fails with ErrSpec; never a panic.
func FuzzParseControllerSpec(f *testing.F) {
	f.Add([]byte(`{"A":[[0.5]],"B":[[1]],"C":[[1]],"D":[[0]],"x0":[0],"k":18,"l":9}`))
	f.Add([]byte(`{"A":[[0,0],[0,0]],"B":[[1],[2]],"C":[[1,1]],"D":[[0]],"x0":[0,0],"k":18,"l":9,"lambda":40,"modulus":"2^255-19"}`))
	f.Add([]byte(`{"A":[[1e308]],"B":[[1]],"C":[[1]],"D":[[0]],"x0":[0],"k":62,"l":61}`))
	f.Add([]byte(`{"A":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseControllerSpec(data)
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("error %v does not wrap ErrSpec", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed spec fails Validate: %v", err)
		}
	})
}

// Anything after the object is refused, a stray } or ] included, which
// json.Decoder.More did not report; white space is not.
func TestControllerSpecTrailingData(t *testing.T) {
	const spec = `{"A":[[0.5]],"B":[[1]],"C":[[1]],"D":[[0]],"x0":[0],"k":18,"l":9}`
	if _, err := ParseControllerSpec([]byte(spec + " \n\t")); err != nil {
		t.Fatalf("trailing white space: %v", err)
	}
	for _, tail := range []string{"}", "]", " }", "{}", "0", ","} {
		if _, err := ParseControllerSpec([]byte(spec + tail)); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "trailing data") {
			t.Errorf("%q after the object: %v, want a trailing-data error", tail, err)
		}
	}
}

// Keys are matched exactly and once each, and a file that is not JSON says
// how: encoding/json alone filled A from "a" and let a repeated key win.
func TestControllerSpecKeysAndJSONErrors(t *testing.T) {
	const body = `"B":[[1]],"C":[[1]],"D":[[0]],"x0":[0],"k":18,"l":9}`
	if s, err := ParseControllerSpec([]byte(`{"A":[[0.5]],` + body)); err != nil || s.Lambda != DefaultLambda || s.Modulus != ModulusAuto {
		t.Fatalf("the valid spec: %v, lambda %d, modulus %q; want the defaults for the fields left out", err, s.Lambda, s.Modulus)
	}
	for _, c := range []struct{ in, want string }{
		{`{"a":[[0.5]],` + body, `unknown field "a"`},
		{`{"A":[[0.5]],"X0":[0],` + body, `unknown field "X0"`},
		{`{"A":[[0.5]],"A":[[0.25]],` + body, `field "A" given twice`},
		{``, "empty file"},
		{"  \n", "empty file"},
		{`{"A":[[0.5]],"B":[[1]`, "ends early"},
		{`{"A":[[0.5]] "B":[[1]]}`, "syntax error at byte"},
		{`[1, 2]`, "want a JSON object"},
		{`null`, "want a JSON object"},
		{`{"A":[[0.5]],"B":"x","C":[[1]],"D":[[0]],"x0":[0],"k":18,"l":9}`, `field "B": cannot use JSON string`},
		// Given as 0 or "", not left out: refused, where they silently
		// took the defaults (40, auto).
		{`{"A":[[0.5]],"lambda":0,` + body, `field "lambda": 0, want 1 to 200`},
		{`{"A":[[0.5]],"modulus":"",` + body, `field "modulus": empty`},
	} {
		_, err := ParseControllerSpec([]byte(c.in))
		if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error containing %q", c.in, err, c.want)
		}
	}
}
