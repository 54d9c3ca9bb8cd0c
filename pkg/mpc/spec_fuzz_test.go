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
