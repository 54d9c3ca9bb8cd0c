package mpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
)

// ControllerSpec is the user-facing controller file (JSON):
//
//	{"A": [[...]], "B": [[...]], "C": [[...]], "D": [[...]], "x0": [...],
//	 "k": 18, "l": 9, "lambda": 40, "modulus": "auto"}
//
// for x_{t+1} = A x_t + B y_t, u_t = C x_t + D y_t with A n x n, B n x p,
// C m x n, D m x p, x0 of length n (all in real units). k and l give the fixed
// point format Q<k,l>; lambda the statistical security of Protocol 2
// (default 40); modulus is "auto" (default), "2^127-1", "2^255-19" or an odd
// decimal integer.
type ControllerSpec struct {
	A       [][]float64 `json:"A"`
	B       [][]float64 `json:"B"`
	C       [][]float64 `json:"C"`
	D       [][]float64 `json:"D"`
	X0      []float64   `json:"x0"`
	K       int         `json:"k"`
	L       int         `json:"l"`
	Lambda  int         `json:"lambda"`
	Modulus string      `json:"modulus"`
}

// Spec defaults.
const (
	DefaultLambda  = 40
	ModulusAuto    = "auto"
	maxSpecDim     = 1000
	maxSpecFileLen = 64 << 20
)

// ErrSpec is wrapped by every controller spec error.
var ErrSpec = errors.New("mpc: controller spec")

// LoadControllerSpec reads and validates a controller file.
func LoadControllerSpec(path string) (ControllerSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return ControllerSpec{}, fmt.Errorf("%w: %w", ErrSpec, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSpecFileLen+1))
	if err != nil {
		return ControllerSpec{}, fmt.Errorf("%w: %s: %w", ErrSpec, path, err)
	}
	s, err := ParseControllerSpec(data)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ParseControllerSpec decodes strictly (unknown fields are errors), fills
// defaults and validates dimensions and values.
func ParseControllerSpec(data []byte) (ControllerSpec, error) {
	var s ControllerSpec
	if len(data) > maxSpecFileLen {
		return s, fmt.Errorf("%w: file larger than %d bytes", ErrSpec, maxSpecFileLen)
	}
	given, err := checkSpecKeys(data)
	if err != nil {
		return s, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, specJSONError(err)
	}
	// Anything but white space after the object, a stray } or ] included
	// (which Decoder.More does not report).
	if _, err := dec.Token(); err != io.EOF {
		return s, fmt.Errorf("%w: trailing data after the JSON object", ErrSpec)
	}
	// The defaults fill fields left out, not fields given as 0 or "": an
	// explicit "lambda": 0 became 40 without a word.
	if !given["lambda"] {
		s.Lambda = DefaultLambda
	}
	if !given["modulus"] {
		s.Modulus = ModulusAuto
	} else if s.Modulus == "" {
		return s, fmt.Errorf("%w: field \"modulus\": empty, want %q or a modulus name (leave the field out for %q)", ErrSpec, ModulusAuto, ModulusAuto)
	}
	return s, s.Validate()
}

// specKeys are the controller file's keys, ControllerSpec's JSON names.
// encoding/json alone matches keys case-insensitively ("a" or "X0" would
// fill A or x0) and lets a repeated key win silently; checkSpecKeys refuses
// both.
var specKeys = func() []string {
	t := reflect.TypeFor[ControllerSpec]()
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	return keys
}()

// checkSpecKeys reads the top-level object's keys and refuses one that is
// not a field (matched exactly) or that comes twice; it returns the keys
// given.
func checkSpecKeys(data []byte) (map[string]bool, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, specJSONError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%w: want a JSON object", ErrSpec)
	}
	seen := make(map[string]bool, len(specKeys))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, specJSONError(err)
		}
		k, _ := tok.(string) // an object's keys are strings, or Token fails
		switch {
		case !slices.Contains(specKeys, k):
			return nil, fmt.Errorf("%w: unknown field %q (the fields, case-sensitive: %s)", ErrSpec, k, strings.Join(specKeys, ", "))
		case seen[k]:
			return nil, fmt.Errorf("%w: field %q given twice", ErrSpec, k)
		}
		seen[k] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, specJSONError(err)
		}
	}
	return seen, nil
}

// specJSONError says what is wrong with a file that is not the JSON it
// should be: empty, cut short, or where its syntax breaks.
func specJSONError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: empty file, want a JSON object", ErrSpec)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the JSON ends early (a file cut short?)", ErrSpec)
	case errors.As(err, &syn):
		return fmt.Errorf("%w: JSON syntax error at byte %d: %s", ErrSpec, syn.Offset, strings.TrimPrefix(err.Error(), "json: "))
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Errorf("%w: field %q: cannot use JSON %s as %s", ErrSpec, typ.Field, typ.Value, typ.Type)
	}
	return fmt.Errorf("%w: %s", ErrSpec, strings.TrimPrefix(err.Error(), "json: "))
}

// Dims returns n, m, p.
func (s ControllerSpec) Dims() (n, m, p int) {
	n = len(s.A)
	if len(s.C) > 0 {
		m = len(s.C)
	}
	if len(s.B) > 0 {
		p = len(s.B[0])
	}
	return
}

// Validate checks dimensions, finiteness and the fixed point parameters; each
// error names the field.
func (s ControllerSpec) Validate() error {
	n, m, p := s.Dims()
	if n < 1 || n > maxSpecDim {
		return fmt.Errorf("%w: field \"A\": need 1 to %d rows, got %d", ErrSpec, maxSpecDim, n)
	}
	if len(s.C) < 1 || m > maxSpecDim {
		return fmt.Errorf("%w: field \"C\": need 1 to %d rows, got %d", ErrSpec, maxSpecDim, len(s.C))
	}
	if len(s.B) < 1 || p < 1 || p > maxSpecDim {
		return fmt.Errorf("%w: field \"B\": need %d rows of 1 to %d columns", ErrSpec, n, maxSpecDim)
	}
	for _, c := range []struct {
		name       string
		m          [][]float64
		rows, cols int
	}{{"A", s.A, n, n}, {"B", s.B, n, p}, {"C", s.C, m, n}, {"D", s.D, m, p}} {
		if len(c.m) != c.rows {
			return fmt.Errorf("%w: field %q: %d rows, want %d", ErrSpec, c.name, len(c.m), c.rows)
		}
		for i, row := range c.m {
			if len(row) != c.cols {
				return fmt.Errorf("%w: field %q: row %d has %d columns, want %d", ErrSpec, c.name, i, len(row), c.cols)
			}
			for j, v := range row {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return fmt.Errorf("%w: field %q: entry (%d,%d) is not finite", ErrSpec, c.name, i, j)
				}
			}
		}
	}
	if len(s.X0) != n {
		return fmt.Errorf("%w: field \"x0\": length %d, want %d", ErrSpec, len(s.X0), n)
	}
	for i, v := range s.X0 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: field \"x0\": entry %d is not finite", ErrSpec, i)
		}
	}
	if s.K < 2 || s.K > MaxFixedBits {
		return fmt.Errorf("%w: field \"k\": %d, want 2 to %d", ErrSpec, s.K, MaxFixedBits)
	}
	if s.L < 1 || s.L >= s.K {
		return fmt.Errorf("%w: field \"l\": %d, want 1 to k-1 = %d", ErrSpec, s.L, s.K-1)
	}
	if s.Lambda < 1 || s.Lambda > 200 {
		return fmt.Errorf("%w: field \"lambda\": %d, want 1 to 200", ErrSpec, s.Lambda)
	}
	return nil
}

// Phi returns Φ = [[A, B], [C, D]] in real units.
func (s ControllerSpec) Phi() [][]float64 {
	n, m, _ := s.Dims()
	phi := make([][]float64, n+m)
	for i := 0; i < n; i++ {
		phi[i] = append(append([]float64{}, s.A[i]...), s.B[i]...)
	}
	for i := 0; i < m; i++ {
		phi[n+i] = append(append([]float64{}, s.C[i]...), s.D[i]...)
	}
	return phi
}

// Resolved is a controller ready to run: parameters, sizing and the clear
// encoded Φ̄ and x̄_0 (which only the client holds).
type Resolved struct {
	Params Params
	Sizing Sizing
	Phi    Matrix // Ecd(Φ, l)
	X0     Matrix // Ecd(x0, l)
	// QuantErr is the largest |Φ - Dcd(Φ̄)| over the entries: the rounding of
	// the controller onto the Q<k,l> grid (0 when every entry is exact).
	QuantErr float64
	// Warnings for the user (an explicit modulus with an unstable A, or
	// with one whose bound cannot be certified; a lambda under 40).
	Warnings []string
}

// Resolve sizes the modulus and encodes the controller. "auto" picks the
// smallest preset satisfying the bound of protocol.md §7 and refuses an A that
// is not Schur stable or whose bound cannot be certified (ErrUncertified); an
// explicit modulus with such an A runs with a warning; too few bits is an
// error stating the bits required.
func (s ControllerSpec) Resolve(v Variant) (Resolved, error) {
	var res Resolved
	if err := s.Validate(); err != nil {
		return res, err
	}
	n, m, p := s.Dims()
	// Round Φ onto the Q<k,l> grid first, so that sizing sees the controller
	// that will actually run.
	grid := func(x [][]float64) ([][]float64, error) {
		out := make([][]float64, len(x))
		for i, row := range x {
			out[i] = make([]float64, len(row))
			for j, val := range row {
				z, err := EncodeInt(val, s.K, s.L)
				if err != nil {
					return nil, fmt.Errorf("entry (%d,%d): %w", i, j, err)
				}
				out[i][j] = math.Ldexp(float64(z), -s.L)
				res.QuantErr = math.Max(res.QuantErr, math.Abs(out[i][j]-val))
			}
		}
		return out, nil
	}
	var q [4][][]float64
	for i, c := range []struct {
		name string
		m    [][]float64
	}{{"A", s.A}, {"B", s.B}, {"C", s.C}, {"D", s.D}} {
		g, err := grid(c.m)
		if err != nil {
			return res, fmt.Errorf("%w: field %q: %w", ErrSpec, c.name, err)
		}
		q[i] = g
	}
	sz, szErr := SizeModulus(q[0], q[1], q[2], q[3], s.K, s.L, s.Lambda)
	res.Sizing = sz
	unstable := errors.Is(szErr, ErrUnstable)
	// A stable A that decays too slowly to be certified runs, as an unstable
	// one does, only on an explicit modulus and with a warning.
	uncertified := errors.Is(szErr, ErrUncertified)
	if szErr != nil && !unstable && !uncertified {
		return res, szErr
	}
	var f *Field
	if s.Modulus == ModulusAuto {
		if unstable || uncertified {
			return res, szErr
		}
		for _, name := range []string{PresetM127, PresetP25519} {
			cand, _ := ParseModulus(name)
			if sz.Check(float64(cand.BitLen()-1)) == nil {
				f = cand
				break
			}
		}
		if f == nil {
			return res, fmt.Errorf("%w: need %d bits (theorem %d, numeric check %d), the largest preset %s has %.2f",
				ErrModulusSmall, sz.RequiredBits, sz.TheoremBits, sz.NumericBits, PresetP25519, 255.0)
		}
	} else {
		var err error
		if f, err = ParseModulus(s.Modulus); err != nil {
			return res, fmt.Errorf("%w: field \"modulus\": %w", ErrSpec, err)
		}
		if unstable {
			res.Warnings = append(res.Warnings, fmt.Sprintf(
				"A is not Schur stable (spectral radius %.4f): the modulus bound of Theorem 1 does not hold and the state may overflow modulus %s",
				sz.Rho, f.Name()))
		} else if uncertified {
			res.Warnings = append(res.Warnings, fmt.Sprintf(
				"A decays too slowly to certify a modulus (spectral radius %.6f; %v): the bound of Theorem 1 is not checked and the state may overflow modulus %s",
				sz.Rho, szErr, f.Name()))
		} else if err := sz.Check(float64(f.BitLen() - 1)); err != nil {
			return res, err
		}
	}
	if s.Lambda < DefaultLambda {
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"lambda = %d: each truncation (Protocol 2) hides the state only within statistical distance 2^-%d; %d or more is the usual choice",
			s.Lambda, s.Lambda+1, DefaultLambda))
	}
	res.Params = Params{Field: f, N: n, M: m, P: p, K: s.K, L: s.L, Lambda: s.Lambda, Variant: v}
	if err := res.Params.Validate(); err != nil {
		return res, err
	}
	var err error
	if res.Phi, err = f.EcdMatrix(s.Phi(), s.K, s.L); err != nil {
		return res, fmt.Errorf("%w: Φ %w", ErrSpec, err)
	}
	if res.X0, err = f.EcdVec(s.X0, s.K, s.L); err != nil {
		return res, fmt.Errorf("%w: field \"x0\": %w", ErrSpec, err)
	}
	return res, nil
}

// FloatController is the plaintext controller in float64, the baseline the
// secure controller is compared with.
type FloatController struct {
	a, b, c, d [][]float64
	x, nx, u   []float64
}

// NewFloatController starts the plaintext controller at x0.
func (s ControllerSpec) NewFloatController() *FloatController {
	n, m, _ := s.Dims()
	fc := &FloatController{a: s.A, b: s.B, c: s.C, d: s.D, x: append([]float64{}, s.X0...),
		nx: make([]float64, n), u: make([]float64, m)}
	return fc
}

// Output returns u_t for y_t without advancing the state (for a tick whose
// update the secure loop gave up). The slice is reused.
func (fc *FloatController) Output(y []float64) []float64 {
	mulAdd(fc.u, fc.c, fc.x, fc.d, y)
	return fc.u
}

// Step returns u_t for y_t and advances the state. The slice is reused.
func (fc *FloatController) Step(y []float64) []float64 {
	fc.Output(y)
	mulAdd(fc.nx, fc.a, fc.x, fc.b, y)
	fc.x, fc.nx = fc.nx, fc.x
	return fc.u
}

// mulAdd sets dst = m1 v1 + m2 v2.
func mulAdd(dst []float64, m1 [][]float64, v1 []float64, m2 [][]float64, v2 []float64) {
	for i := range dst {
		s := 0.0
		for j, x := range v1 {
			s += m1[i][j] * x
		}
		for j, x := range v2 {
			s += m2[i][j] * x
		}
		dst[i] = s
	}
}
