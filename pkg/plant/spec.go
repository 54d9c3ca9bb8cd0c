package plant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// Plant kinds accepted in Spec.Kind.
const (
	KindLTI  = "lti"
	KindQube = "qube-servo2"
)

// Limits enforced by Spec.Validate.
const (
	MaxInputDelay = 1000  // ticks; the delay line holds this many inputs
	MaxPeriodMs   = 10000 // the QUBE's sampling period is 1..MaxPeriodMs ms
	MaxAlpha0Deg  = 90    // |alpha0_deg| must be strictly below this
)

// maxSpecFileLen bounds a plant spec as the controller's is bounded
// (pkg/mpc): LoadSpec reads no more of a file, and ParseSpec refuses more.
// A variable for the tests.
var maxSpecFileLen = 64 << 20

// Spec is the user-facing description of a plant, one JSON object whose
// "kind" selects the rest of its fields:
//
//	{"kind":"lti","A":[[..]],"B":[[..]],"C":[[..]],"x0":[..],"input_delay":d}
//	{"kind":"qube-servo2","alpha0_deg":3,"theta0_deg":0,"input_delay":1,"period_ms":40}
//
// An "lti" plant is discrete-time and has no notion of seconds:
// x_{t+1} = A x_t + B u_t, y_t = C x_t, with A n×n, B n×m, C p×n, and no
// quantization. "A", "B" and "C" are required; "x0" (length n) defaults to
// zero. A "qube-servo2" plant is the pendulum of protocol.md §8 started at rest
// at the given angles (degrees; α = 0 is upright), sampled every period_ms
// milliseconds; "period_ms" is required, the angles default to 0. In both,
// "input_delay" (ticks, default 0) is the d of the Plant interface.
//
// A Spec built in Go rather than parsed must pass Validate; New calls it.
// Fields that belong to the other kind must be left at their zero value.
type Spec struct {
	Kind string `json:"kind"`

	A  [][]float64 `json:"A,omitempty"`
	B  [][]float64 `json:"B,omitempty"`
	C  [][]float64 `json:"C,omitempty"`
	X0 []float64   `json:"x0,omitempty"`

	Alpha0Deg    float64 `json:"alpha0_deg,omitempty"`
	Theta0Deg    float64 `json:"theta0_deg,omitempty"`
	PeriodMillis int     `json:"period_ms,omitempty"`

	InputDelay int `json:"input_delay,omitempty"`
}

// kindFields lists the JSON keys each kind accepts, and which are required.
var kindFields = map[string]map[string]bool{
	KindLTI:  {"kind": true, "A": true, "B": true, "C": true, "x0": false, "input_delay": false},
	KindQube: {"kind": true, "alpha0_deg": false, "theta0_deg": false, "input_delay": false, "period_ms": true},
}

// ParseSpec decodes and validates a JSON plant spec. It is strict: keys are
// matched exactly (case included), a key the kind does not use is an error,
// so are missing required keys, non-numbers, numbers that overflow float64,
// trailing data and everything Validate rejects. Errors start with "plant: "
// and, where one field is at fault, name it as a *FieldError; all satisfy
// errors.Is(err, ErrSpec). Matrix rows and columns in messages count from 0.
func ParseSpec(data []byte) (Spec, error) {
	if len(data) > maxSpecFileLen {
		return Spec{}, fmt.Errorf("%w: larger than %d bytes", ErrSpec, maxSpecFileLen)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return Spec{}, jsonError(err)
	}
	if fields == nil {
		return Spec{}, fmt.Errorf("%w: want a JSON object, got null", ErrSpec)
	}
	rawKind, ok := fields["kind"]
	if !ok {
		return Spec{}, fieldErr("kind", "missing; want %q or %q", KindLTI, KindQube)
	}
	var kind string
	if err := json.Unmarshal(rawKind, &kind); err != nil {
		return Spec{}, fieldErr("kind", "want a string, got %s", rawKind)
	}
	allowed, ok := kindFields[kind]
	if !ok {
		return Spec{}, fieldErr("kind", "unknown kind %q; want %q or %q", kind, KindLTI, KindQube)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if _, ok := allowed[k]; ok {
			continue
		}
		for other, otherFields := range kindFields {
			if _, ok := otherFields[k]; ok {
				return Spec{}, fieldErr(k, "not used by kind %q (it belongs to kind %q)", kind, other)
			}
		}
		return Spec{}, fieldErr(k, "unknown field for kind %q", kind)
	}
	required := make([]string, 0, len(allowed))
	for k, req := range allowed {
		if req {
			required = append(required, k)
		}
	}
	slices.Sort(required)
	for _, k := range required {
		if _, ok := fields[k]; !ok {
			return Spec{}, fieldErr(k, "missing; kind %q requires it", kind)
		}
	}

	// The key check above is stricter than DisallowUnknownFields (which
	// matches keys case-insensitively); keep both as belt and braces.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return Spec{}, jsonError(err)
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// jsonError turns an encoding/json error into a spec error naming the field
// when encoding/json knows it.
func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if typeErr.Field != "" {
			return fieldErr(typeErr.Field, "cannot use JSON %s as %s", typeErr.Value, typeErr.Type)
		}
		return fmt.Errorf("%w: want a JSON object, got %s", ErrSpec, typeErr.Value)
	}
	var synErr *json.SyntaxError
	if errors.As(err, &synErr) {
		return fmt.Errorf("%w: JSON syntax error at byte %d: %v", ErrSpec, synErr.Offset, err)
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return fmt.Errorf("%w: %s", ErrSpec, msg)
}

// LoadSpec reads and parses the JSON plant spec in the file at path. It reads
// no more than the largest spec ParseSpec takes, so a wrong path (a device, a
// huge file) is refused without being read whole.
func LoadSpec(path string) (Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return Spec{}, fmt.Errorf("plant: load spec: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(maxSpecFileLen)+1))
	if err != nil {
		return Spec{}, fmt.Errorf("plant: load spec: %s: %w", path, err)
	}
	s, err := ParseSpec(data)
	if err != nil {
		return Spec{}, fmt.Errorf("%w (in %s)", err, path)
	}
	return s, nil
}

// PeriodMs is the sampling period in milliseconds: period_ms for a
// "qube-servo2" plant. An "lti" plant is discrete and not time-based, and
// gets 0; a caller pacing a real-time loop must choose its own period for it.
func (s Spec) PeriodMs() int {
	if s.Kind == KindQube {
		return s.PeriodMillis
	}
	return 0
}

// Validate checks a Spec whether parsed or built in Go: kind known,
// 0 <= input_delay <= MaxInputDelay, matrices non-empty, rectangular, with
// consistent dimensions and finite entries (lti), finite angles with
// |alpha0_deg| < 90 and 1 <= period_ms <= MaxPeriodMs (qube), and the other
// kind's fields at their zero value.
func (s Spec) Validate() error {
	switch s.Kind {
	case KindLTI:
		return s.validateLTI()
	case KindQube:
		return s.validateQube()
	case "":
		return fieldErr("kind", "missing; want %q or %q", KindLTI, KindQube)
	default:
		return fieldErr("kind", "unknown kind %q; want %q or %q", s.Kind, KindLTI, KindQube)
	}
}

func (s Spec) validateDelay() error {
	if s.InputDelay < 0 || s.InputDelay > MaxInputDelay {
		return fieldErr("input_delay", "got %d, want 0..%d ticks", s.InputDelay, MaxInputDelay)
	}
	return nil
}

func (s Spec) validateLTI() error {
	// != 0 also catches NaN.
	switch {
	case s.Alpha0Deg != 0:
		return fieldErr("alpha0_deg", "not used by kind %q", KindLTI)
	case s.Theta0Deg != 0:
		return fieldErr("theta0_deg", "not used by kind %q", KindLTI)
	case s.PeriodMillis != 0:
		return fieldErr("period_ms", "not used by kind %q; an lti plant is discrete", KindLTI)
	}
	n := len(s.A)
	if n == 0 {
		return fieldErr("A", "missing or empty; want an n×n matrix with n >= 1")
	}
	if err := checkMatrix("A", s.A, n, n, "columns", "the rows of A"); err != nil {
		return err
	}
	if len(s.B) == 0 {
		return fieldErr("B", "missing or empty; want an n×m matrix with n = %d, m >= 1", n)
	}
	if len(s.B) != n {
		return fieldErr("B", "has %d rows, want %d (the rows of A)", len(s.B), n)
	}
	m := len(s.B[0])
	if m == 0 {
		return fieldErr("B", "row 0 is empty; want at least one input column")
	}
	if err := checkMatrix("B", s.B, n, m, "columns", "the columns of row 0"); err != nil {
		return err
	}
	if len(s.C) == 0 {
		return fieldErr("C", "missing or empty; want a p×n matrix with p >= 1, n = %d", n)
	}
	if err := checkMatrix("C", s.C, len(s.C), n, "columns", "the rows of A"); err != nil {
		return err
	}
	if s.X0 != nil {
		if len(s.X0) != n {
			return fieldErr("x0", "has length %d, want %d (the rows of A)", len(s.X0), n)
		}
		for i, v := range s.X0 {
			if !finite(v) {
				return fieldErr("x0", "entry %d is %v, want a finite number", i, v)
			}
		}
	}
	return s.validateDelay()
}

// checkMatrix checks that M has the given shape (the row count is checked by
// the caller where it has its own message) and finite entries.
func checkMatrix(field string, M [][]float64, rows, cols int, what, why string) error {
	if len(M) != rows {
		return fieldErr(field, "has %d rows, want %d", len(M), rows)
	}
	for i, row := range M {
		if len(row) != cols {
			return fieldErr(field, "row %d has %d %s, want %d (%s)", i, len(row), what, cols, why)
		}
		for j, v := range row {
			if !finite(v) {
				return fieldErr(field, "entry [%d][%d] is %v, want a finite number", i, j, v)
			}
		}
	}
	return nil
}

func (s Spec) validateQube() error {
	switch {
	case s.A != nil:
		return fieldErr("A", "not used by kind %q", KindQube)
	case s.B != nil:
		return fieldErr("B", "not used by kind %q", KindQube)
	case s.C != nil:
		return fieldErr("C", "not used by kind %q", KindQube)
	case s.X0 != nil:
		return fieldErr("x0", "not used by kind %q", KindQube)
	}
	if !finite(s.Alpha0Deg) || math.Abs(s.Alpha0Deg) >= MaxAlpha0Deg {
		return fieldErr("alpha0_deg", "got %v, want a finite angle with |alpha0_deg| < %d (0 is upright)", s.Alpha0Deg, MaxAlpha0Deg)
	}
	if !finite(s.Theta0Deg) {
		return fieldErr("theta0_deg", "got %v, want a finite angle", s.Theta0Deg)
	}
	if s.PeriodMillis < 1 || s.PeriodMillis > MaxPeriodMs {
		return fieldErr("period_ms", "got %d, want 1..%d", s.PeriodMillis, MaxPeriodMs)
	}
	return s.validateDelay()
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// New builds the plant a Spec describes, after validating it. The concrete
// type is *LTI or *Qube.
func New(s Spec) (Plant, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	switch s.Kind {
	case KindLTI:
		return newLTI(s), nil
	default:
		return newQube(s, 1), nil
	}
}
