package plant

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const ltiOK = `{"kind":"lti","A":[[1,1],[0,1]],"B":[[0],[1]],"C":[[1,0]],"x0":[1,2],"input_delay":2}`

func TestParseSpecLTI(t *testing.T) {
	got, err := ParseSpec([]byte(ltiOK))
	if err != nil {
		t.Fatalf("ParseSpec: %v", err)
	}
	want := Spec{
		Kind:       KindLTI,
		A:          [][]float64{{1, 1}, {0, 1}},
		B:          [][]float64{{0}, {1}},
		C:          [][]float64{{1, 0}},
		X0:         []float64{1, 2},
		InputDelay: 2,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, want := got.PeriodMs(), 0; got != want {
		t.Errorf("PeriodMs: got %d, want %d", got, want)
	}
	p, err := New(got)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if p.Outputs() != 1 || p.Inputs() != 1 {
		t.Errorf("dims: got p=%d m=%d, want p=1 m=1", p.Outputs(), p.Inputs())
	}
}

// The example file shipped with the repository is the testbed of §8.
func TestLoadSpecExample(t *testing.T) {
	got, err := LoadSpec("../../examples/qube-servo2/plant.json")
	if err != nil {
		t.Fatalf("LoadSpec: %v", err)
	}
	want := Spec{Kind: KindQube, Alpha0Deg: 3, Theta0Deg: 0, InputDelay: 1, PeriodMillis: 40}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, want := got.PeriodMs(), 40; got != want {
		t.Errorf("PeriodMs: got %d, want %d", got, want)
	}
	p, err := New(got)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, ok := p.(*Qube); !ok {
		t.Errorf("New: got %T, want *Qube", p)
	}
}

func TestLoadSpecMissingFile(t *testing.T) {
	_, err := LoadSpec("testdata/does-not-exist.json")
	if err == nil || !strings.HasPrefix(err.Error(), "plant: ") {
		t.Errorf("got %v, want a plant: error", err)
	}
}

// A spec file over the limit is refused naming the limit and the file, and
// no more of it than the limit is read.
func TestLoadSpecTooLarge(t *testing.T) {
	defer func(n int) { maxSpecFileLen = n }(maxSpecFileLen)
	maxSpecFileLen = len(ltiOK)
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.json")
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(ok, []byte(ltiOK), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, []byte(ltiOK+" "), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSpec(ok); err != nil {
		t.Fatalf("a spec at the limit: %v", err)
	}
	_, err := LoadSpec(big)
	if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "larger than "+strconv.Itoa(len(ltiOK))+" bytes") || !strings.Contains(err.Error(), big) {
		t.Fatalf("a spec one byte over the limit: %v; want ErrSpec naming the limit and the file", err)
	}
}

func TestParseSpecErrors(t *testing.T) {
	const qube = `"kind":"qube-servo2","period_ms":40`
	tests := []struct {
		name, json, want string // want: a substring of the error
	}{
		{"unknown field", `{"kind":"lti","A":[[1]],"B":[[1]],"C":[[1]],"foo":1}`, `field "foo": unknown field`},
		{"key case", `{"kind":"lti","a":[[1]],"B":[[1]],"C":[[1]]}`, `field "a"`},
		{"other kind's field", `{"kind":"lti","A":[[1]],"B":[[1]],"C":[[1]],"period_ms":40}`, `field "period_ms": not used by kind "lti"`},
		{"matrix in qube", `{` + qube + `,"A":[[1]]}`, `field "A": not used by kind "qube-servo2"`},
		{"ragged A", `{"kind":"lti","A":[[1,0],[0,1,2]],"B":[[1],[1]],"C":[[1,0]]}`, `plant: field "A": row 1 has 3 columns, want 2`},
		{"empty A", `{"kind":"lti","A":[],"B":[[1]],"C":[[1]]}`, `field "A": missing or empty`},
		{"B rows", `{"kind":"lti","A":[[1,0],[0,1]],"B":[[1]],"C":[[1,0]]}`, `field "B": has 1 rows, want 2`},
		{"B empty row", `{"kind":"lti","A":[[1]],"B":[[]],"C":[[1]]}`, `field "B": row 0 is empty`},
		{"ragged B", `{"kind":"lti","A":[[1,0],[0,1]],"B":[[1,2],[1]],"C":[[1,0]]}`, `field "B": row 1 has 1 columns, want 2`},
		{"C columns", `{"kind":"lti","A":[[1,0],[0,1]],"B":[[1],[1]],"C":[[1,0,0]]}`, `field "C": row 0 has 3 columns, want 2`},
		{"x0 length", `{"kind":"lti","A":[[1]],"B":[[1]],"C":[[1]],"x0":[1,2]}`, `field "x0": has length 2, want 1`},
		{"missing B", `{"kind":"lti","A":[[1]],"C":[[1]]}`, `field "B": missing`},
		{"bad kind", `{"kind":"pendulum"}`, `field "kind": unknown kind "pendulum"`},
		{"missing kind", `{"A":[[1]]}`, `field "kind": missing`},
		{"kind not string", `{"kind":3}`, `field "kind": want a string`},
		{"negative delay", `{` + qube + `,"input_delay":-1}`, `field "input_delay": got -1, want 0..1000`},
		{"huge delay", `{"kind":"lti","A":[[1]],"B":[[1]],"C":[[1]],"input_delay":1001}`, `field "input_delay": got 1001`},
		{"fractional delay", `{` + qube + `,"input_delay":1.5}`, `field "input_delay"`},
		{"missing period", `{"kind":"qube-servo2"}`, `field "period_ms": missing`},
		{"zero period", `{"kind":"qube-servo2","period_ms":0}`, `field "period_ms": got 0, want 1..10000`},
		{"long period", `{"kind":"qube-servo2","period_ms":10001}`, `field "period_ms": got 10001`},
		{"fallen pendulum", `{` + qube + `,"alpha0_deg":90}`, `field "alpha0_deg": got 90`},
		{"negative fallen pendulum", `{` + qube + `,"alpha0_deg":-120}`, `field "alpha0_deg": got -120`},
		{"string entry", `{"kind":"lti","A":[["x"]],"B":[[1]],"C":[[1]]}`, `field "A": cannot use JSON string`},
		{"overflow", `{"kind":"lti","A":[[1e400]],"B":[[1]],"C":[[1]]}`, `field "A": cannot use JSON number 1e400`},
		{"angle string", `{` + qube + `,"theta0_deg":"0"}`, `field "theta0_deg"`},
		{"trailing data", `{` + qube + `} {}`, `plant: invalid spec: JSON syntax error`},
		{"not JSON", `kind: lti`, `plant: invalid spec: JSON syntax error`},
		{"array", `[1]`, `plant: invalid spec: want a JSON object`},
		{"null", `null`, `plant: invalid spec: want a JSON object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSpec([]byte(tt.json))
			if err == nil {
				t.Fatalf("ParseSpec(%s): got nil error, want %q", tt.json, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseSpec(%s): got %q, want it to contain %q", tt.json, err, tt.want)
			}
			if !errors.Is(err, ErrSpec) {
				t.Errorf("errors.Is(%v, ErrSpec) = false, want true", err)
			}
		})
	}
}

// Specs built in Go skip encoding/json, which already refuses NaN and Inf;
// New must still refuse them.
func TestNewValidatesProgrammaticSpecs(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	lti := func(mod func(*Spec)) Spec {
		s := Spec{Kind: KindLTI, A: [][]float64{{1}}, B: [][]float64{{1}}, C: [][]float64{{1}}}
		mod(&s)
		return s
	}
	qube := func(mod func(*Spec)) Spec {
		s := Spec{Kind: KindQube, PeriodMillis: 40}
		mod(&s)
		return s
	}
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"NaN in A", lti(func(s *Spec) { s.A[0][0] = nan }), `plant: field "A": entry [0][0] is NaN`},
		{"Inf in C", lti(func(s *Spec) { s.C[0][0] = -inf }), `field "C": entry [0][0] is -Inf`},
		{"NaN in x0", lti(func(s *Spec) { s.X0 = []float64{nan} }), `field "x0": entry 0 is NaN`},
		{"angle on lti", lti(func(s *Spec) { s.Alpha0Deg = nan }), `field "alpha0_deg": not used`},
		{"NaN alpha0", qube(func(s *Spec) { s.Alpha0Deg = nan }), `field "alpha0_deg": got NaN`},
		{"Inf theta0", qube(func(s *Spec) { s.Theta0Deg = inf }), `field "theta0_deg": got +Inf`},
		{"x0 on qube", qube(func(s *Spec) { s.X0 = []float64{} }), `field "x0": not used`},
		{"negative delay", qube(func(s *Spec) { s.InputDelay = -3 }), `field "input_delay": got -3`},
		{"no kind", Spec{}, `field "kind": missing`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.spec)
			if err == nil {
				t.Fatalf("New: got plant %T and nil error, want %q", p, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: got %q, want it to contain %q", err, tt.want)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("errors.As(%v, *FieldError) = false, want true", err)
			}
		})
	}
}

// FuzzParseSpec checks that ParseSpec never panics, that every spec it
// accepts builds a plant, and that it re-encodes to an equal spec.
func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(ltiOK))
	f.Add([]byte(`{"kind":"qube-servo2","alpha0_deg":3,"theta0_deg":0,"input_delay":1,"period_ms":40}`))
	f.Add([]byte(`{"kind":"lti","A":[[0.5]],"B":[[1,2]],"C":[[1],[2]]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "plant: ") || !errors.Is(err, ErrSpec) {
				t.Fatalf("error %q lacks the plant: prefix or ErrSpec", err)
			}
			return
		}
		p, err := New(s)
		if err != nil {
			t.Fatalf("New rejected a parsed spec: %v", err)
		}
		if len(p.Measure()) != p.Outputs() {
			t.Fatalf("Measure: got %d values, want %d", len(p.Measure()), p.Outputs())
		}
		enc, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		s2, err := ParseSpec(enc)
		if err != nil {
			t.Fatalf("ParseSpec(%s) after re-encoding: %v", enc, err)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip: got %+v, want %+v", s2, s)
		}
	})
}
