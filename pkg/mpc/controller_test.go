package mpc

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// pendulumGains are the designed gains of protocol.md §8, per degree:
// k = [k1, ..., k5] = [264, -549, 5, -6, -431] / 512, exact in Q<18,9>.
var pendulumGains = [5]float64{264.0 / 512, -549.0 / 512, 5.0 / 512, -6.0 / 512, -431.0 / 512}

// pendulumPhi is Φ = [[A, B], [C, D]] for the QUBE-Servo 2 controller of
// protocol.md §8 (n = 3, p = 2, m = 1).
func pendulumPhi() [][]float64 {
	k1, k2, k3, k4, k5 := pendulumGains[0], pendulumGains[1], pendulumGains[2], pendulumGains[3], pendulumGains[4]
	return [][]float64{
		{0, 0, 0, -50, 0},
		{0, 0, 0, 0, -50},
		{k3, k4, k5, k1, k2},
		{k3, k4, k5, k1, k2},
	}
}

func pendulumParams(f *Field, v Variant) Params {
	return Params{Field: f, N: 3, M: 1, P: 2, K: 18, L: 9, Lambda: 40, Variant: v}
}

// twoParties builds P0 and P1 for the pendulum with fresh shares of Φ̄ and
// x̄_0 = 0, completes the fixed-mask set-up if needed, and returns a dealer.
func twoParties(t *testing.T, f *Field, v Variant, compress bool) (p0, p1 *Party, d *Dealer, sess *Session) {
	t.Helper()
	prm := pendulumParams(f, v)
	phi, err := f.EcdMatrix(pendulumPhi(), prm.K, prm.L)
	if err != nil {
		t.Fatal(err)
	}
	r := seeded(101)
	phi0, phi1 := mustShare(t, f, r, phi)
	x0, x1 := mustShare(t, f, r, NewMatrix(prm.N, 1))
	if p0, err = NewParty(prm, 0, phi0, x0); err != nil {
		t.Fatal(err)
	}
	if p1, err = NewParty(prm, 1, phi1, x1); err != nil {
		t.Fatal(err)
	}
	sess = NewSession([32]byte{'s', 'e', 's', 's'})
	if v == FixedMask {
		u0, u1, err := sess.FixedUShares(prm)
		if err != nil {
			t.Fatal(err)
		}
		if err := FixedSetup(p0, p1, u0, u1); err != nil {
			t.Fatal(err)
		}
	}
	if d, err = NewDealer(prm, sess, compress); err != nil {
		t.Fatal(err)
	}
	return p0, p1, d, sess
}

// tickMaterial draws one item and returns both parties' material.
func tickMaterial(t *testing.T, d *Dealer, sess *Session, r interface{ Read([]byte) (int, error) }) (m0, m1 TickMaterial) {
	t.Helper()
	it, err := d.Next(r)
	if err != nil {
		t.Fatal(err)
	}
	if m0, err = it.Material(d.prm, 0, sess.P0Seed()); err != nil {
		t.Fatal(err)
	}
	return m0, it.P1
}

func TestParseVariant(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Variant
	}{{"per-tick", PerTick}, {"fixed", FixedMask}} {
		got, err := ParseVariant(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseVariant(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
	for _, in := range []string{"fixed-mask", ""} {
		if _, err := ParseVariant(in); !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("ParseVariant(%q) error = %v", in, err)
		}
	}
}

func TestParamsValidate(t *testing.T) {
	f := mustField(t, PresetM127)
	good := pendulumParams(f, PerTick)
	if err := good.Validate(); err != nil {
		t.Fatalf("pendulum params: %v", err)
	}
	if got, want := good.Kappa(), 127-1-40-1; got != want {
		t.Errorf("Kappa = %d, want floor(log2 q) - λ - 1 = %d", got, want)
	}
	if r, c := good.PhiShape(); r != 4 || c != 5 {
		t.Errorf("PhiShape = %d, %d; want 4, 5", r, c)
	}
	small := mustFieldQ(t, Elem{1<<50 + 1}) // κ = 51 - 2 - 40 = 9 = l
	for name, mod := range map[string]func(*Params){
		"no field":  func(p *Params) { p.Field = nil },
		"n = 0":     func(p *Params) { p.N = 0 },
		"m < 0":     func(p *Params) { p.M = -1 },
		"p = 0":     func(p *Params) { p.P = 0 },
		"k = 1":     func(p *Params) { p.K = 1 },
		"k = 63":    func(p *Params) { p.K = 63 },
		"l = 0":     func(p *Params) { p.L = 0 },
		"l = k":     func(p *Params) { p.L = p.K },
		"λ = 0":     func(p *Params) { p.Lambda = 0 },
		"κ <= l":    func(p *Params) { p.Field = small },
		"λ too big": func(p *Params) { p.Lambda = 120 },
	} {
		p := good
		mod(&p)
		if err := p.Validate(); !errors.Is(err, ErrParams) {
			t.Errorf("%s: Validate = %v, want ErrParams", name, err)
		}
	}
}

// TestPartyMisuse: every out-of-order call and every malformed input is an
// error with the right sentinel, never a panic, and the party still runs a
// correct tick afterwards.
func TestPartyMisuse(t *testing.T) {
	f := mustField(t, PresetM127)
	for _, v := range []Variant{PerTick, FixedMask} {
		t.Run(v.String(), func(t *testing.T) {
			p0, p1, d, sess := twoParties(t, f, v, false)
			prm := p0.Params()
			r := seeded(102)
			y0, y1 := mustShare(t, f, r, NewMatrix(prm.P, 1))
			m0, m1 := tickMaterial(t, d, sess, r)

			// Steps out of order.
			if _, _, err := p0.Multiply(MulMsg{}); !errors.Is(err, ErrStage) {
				t.Errorf("Multiply before Begin: %v, want ErrStage", err)
			}
			if err := p1.Finish(&TruncMsg{}); !errors.Is(err, ErrStage) {
				t.Errorf("Finish before Multiply: %v, want ErrStage", err)
			}

			// Malformed sensor share and material.
			if _, err := p0.Begin(NewMatrix(prm.P+1, 1), m0); !errors.Is(err, ErrDimension) {
				t.Errorf("Begin with a %dx1 measurement: %v, want ErrDimension", prm.P+1, err)
			}
			bad := map[string]func(*TickMaterial){
				"V short":   func(m *TickMaterial) { m.Triple.V = NewMatrix(4, 1) },
				"V nil":     func(m *TickMaterial) { m.Triple.V = Matrix{} },
				"W wide":    func(m *TickMaterial) { m.Triple.W = NewMatrix(4, 2) },
				"M short":   func(m *TickMaterial) { m.Mask.M = NewMatrix(2, 1) },
				"L missing": func(m *TickMaterial) { m.Mask.L = Matrix{} },
				"W lies":    func(m *TickMaterial) { m.Triple.W = Matrix{Rows: 4, Cols: 1} }, // shape without data
			}
			if v == PerTick {
				bad["U missing"] = func(m *TickMaterial) { m.Triple.U = Matrix{} }
				bad["U transposed"] = func(m *TickMaterial) { m.Triple.U = NewMatrix(5, 4) }
			}
			for name, mod := range bad {
				m := m0
				mod(&m)
				if _, err := p0.Begin(y0, m); !errors.Is(err, ErrMaterial) {
					t.Errorf("Begin with material %s: %v, want ErrMaterial", name, err)
				}
			}

			// A good Begin, then malformed peer messages.
			msg0, err := p0.Begin(y0, m0)
			if err != nil {
				t.Fatal(err)
			}
			msg1, err := p1.Begin(y1, m1)
			if err != nil {
				t.Fatal(err)
			}
			peers := map[string]MulMsg{
				"no T":       {S: msg1.S},
				"T short":    {S: msg1.S, T: NewMatrix(4, 1)},
				"T lies":     {S: msg1.S, T: Matrix{Rows: 5, Cols: 1}},
				"T as a row": {S: msg1.S, T: NewMatrix(1, 5)},
			}
			if v == PerTick {
				peers["no S"] = MulMsg{T: msg1.T}
				peers["S short"] = MulMsg{S: NewMatrix(4, 4), T: msg1.T}
				peers["S lies"] = MulMsg{S: Matrix{Rows: 4, Cols: 5, Data: make([]Elem, 19)}, T: msg1.T}
			}
			for name, peer := range peers {
				if _, _, err := p0.Multiply(peer); !errors.Is(err, ErrPeer) {
					t.Errorf("Multiply with peer message %s: %v, want ErrPeer", name, err)
				}
			}
			if err := p0.Finish(nil); !errors.Is(err, ErrStage) {
				t.Errorf("Finish after a failed Multiply: %v, want ErrStage", err)
			}

			// The good messages still work, and the Protocol 2 message checks.
			u0, tr, err := p0.Multiply(msg1)
			if err != nil {
				t.Fatal(err)
			}
			u1, tr1, err := p1.Multiply(msg0)
			if err != nil {
				t.Fatal(err)
			}
			if tr == nil || tr1 != nil {
				t.Fatalf("Protocol 2 messages: P0 %v, P1 %v; want only P0's", tr, tr1)
			}
			if err := p0.Finish(tr); !errors.Is(err, ErrPeer) {
				t.Errorf("P0 Finish with a message: %v, want ErrPeer", err)
			}
			for name, peer := range map[string]*TruncMsg{
				"nil":      nil,
				"empty":    {},
				"short":    {Y: NewMatrix(2, 1)},
				"lies":     {Y: Matrix{Rows: 3, Cols: 1}},
				"as a row": {Y: NewMatrix(1, 3)},
			} {
				if err := p1.Finish(peer); !errors.Is(err, ErrPeer) {
					t.Errorf("P1 Finish with message %s: %v, want ErrPeer", name, err)
				}
			}
			if err := p0.Finish(nil); err != nil {
				t.Fatal(err)
			}
			if err := p1.Finish(tr); err != nil {
				t.Fatal(err)
			}
			// y = 0 and x = 0, so ū = 0 and the state stays 0 (W = 0 for X = 0).
			if u := f.ReconstNew(u0, u1); !u.Equal(NewMatrix(1, 1)) {
				t.Errorf("ū = %s, want 0", f.String(u.Data[0]))
			}
			s0, s1 := p0.State(), p1.State()
			if x := f.ReconstNew(s0, s1); !x.Equal(NewMatrix(3, 1)) {
				t.Errorf("state after a zero tick is not zero")
			}
			if err := p0.Finish(nil); !errors.Is(err, ErrStage) {
				t.Errorf("second Finish: %v, want ErrStage", err)
			}
		})
	}
}

func TestPartySetupErrors(t *testing.T) {
	f := mustField(t, PresetM127)
	prm := pendulumParams(f, FixedMask)
	phi, x0 := NewMatrix(4, 5), NewMatrix(3, 1)
	for name, tc := range map[string]struct {
		prm     Params
		id      int
		phi, x0 Matrix
		err     error
	}{
		"id 2":       {prm, 2, phi, x0, ErrParams},
		"id -1":      {prm, -1, phi, x0, ErrParams},
		"Φ 5x4":      {prm, 0, NewMatrix(5, 4), x0, ErrDimension},
		"Φ no data":  {prm, 0, Matrix{Rows: 4, Cols: 5}, x0, ErrDimension},
		"x0 4x1":     {prm, 0, phi, NewMatrix(4, 1), ErrDimension},
		"bad params": {Params{Field: f}, 0, phi, x0, ErrParams},
	} {
		if _, err := NewParty(tc.prm, tc.id, tc.phi, tc.x0); !errors.Is(err, tc.err) {
			t.Errorf("NewParty %s: %v, want %v", name, err, tc.err)
		}
	}

	p, err := NewParty(prm, 0, phi, x0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Ready() {
		t.Errorf("fixed-mask party is ready before set-up")
	}
	m := TickMaterial{Triple: TripleShare{V: NewMatrix(5, 1), W: NewMatrix(4, 1)}, Mask: MaskShare{M: NewMatrix(3, 1), L: NewMatrix(3, 1)}}
	if _, err := p.Begin(NewMatrix(2, 1), m); !errors.Is(err, ErrStage) {
		t.Errorf("Begin without fixed set-up: %v, want ErrStage", err)
	}
	if err := p.FixedSetupFinish(NewMatrix(4, 5), NewMatrix(4, 5)); !errors.Is(err, ErrStage) {
		t.Errorf("FixedSetupFinish before FixedSetupMsg: %v, want ErrStage", err)
	}
	if _, err := p.FixedSetupMsg(NewMatrix(5, 4)); !errors.Is(err, ErrDimension) {
		t.Errorf("FixedSetupMsg with a 5x4 U: %v, want ErrDimension", err)
	}
	own, err := p.FixedSetupMsg(NewMatrix(4, 5))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.FixedSetupFinish(own, NewMatrix(4, 4)); !errors.Is(err, ErrPeer) {
		t.Errorf("FixedSetupFinish with a 4x4 peer share: %v, want ErrPeer", err)
	}
	if err := p.FixedSetupFinish(own, NewMatrix(4, 5)); err != nil || !p.Ready() {
		t.Errorf("FixedSetupFinish: %v, ready %v", err, p.Ready())
	}

	pt, err := NewParty(pendulumParams(f, PerTick), 1, phi, x0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pt.FixedSetupMsg(NewMatrix(4, 5)); !errors.Is(err, ErrStage) {
		t.Errorf("FixedSetupMsg in the per-tick variant: %v, want ErrStage", err)
	}
	if pt.ID() != 1 || !pt.Ready() {
		t.Errorf("ID %d, Ready %v", pt.ID(), pt.Ready())
	}

	// State persistence.
	st := NewMatrix(3, 1)
	st.Data[1] = f.FromInt64(-7)
	if err := pt.SetState(st); err != nil {
		t.Fatal(err)
	}
	if got := pt.State(); !got.Equal(st) {
		t.Errorf("State after SetState differs")
	}
	st.Data[1] = Elem{} // State and SetState copy
	if got := pt.State(); got.Equal(st) {
		t.Errorf("SetState kept a reference to its argument")
	}
	for _, bad := range []Matrix{NewMatrix(2, 1), NewMatrix(1, 3), {Rows: 3, Cols: 1}} {
		if err := pt.SetState(bad); !errors.Is(err, ErrDimension) {
			t.Errorf("SetState(%dx%d): %v, want ErrDimension", bad.Rows, bad.Cols, err)
		}
	}
}

// twinPairs builds two fixed-mask pendulum pairs holding identical shares
// (twoParties), so that one can run on fresh material and the other on
// prepared or recycled material, and the dealer.
func twinPairs(t *testing.T, f *Field) (a0, a1, b0, b1 *Party, d *Dealer, sess *Session) {
	t.Helper()
	a0, a1, d, sess = twoParties(t, f, FixedMask, true)
	b0, b1, _, _ = twoParties(t, f, FixedMask, true)
	return
}

// TestPrepareIsExact: material prepared off the critical path gives the
// same output and state shares, bit for bit, as unprepared material, on
// both presets; material prepared before a repeated fixed-mask set-up is not
// used prepared (and still gives the same result); Prepare does nothing in
// the per-tick variant.
func TestPrepareIsExact(t *testing.T) {
	for _, name := range []string{PresetM127, PresetP25519} {
		t.Run(name, func(t *testing.T) {
			f := mustField(t, name)
			a0, a1, b0, b1, d, sess := twinPairs(t, f)
			prm := a0.Params()
			ry := seeded(7)
			ua, ub := NewMatrix(prm.M, 1), NewMatrix(prm.M, 1)
			prepared := 0
			for tick := range 200 {
				y0, y1 := mustShare(t, f, ry, mustRandomMatrix(t, f, ry, prm.P, 1))
				m0, m1 := tickMaterial(t, d, sess, ry)
				p0m, p1m := m0, m1
				if err := a0.Prepare(&p0m); err != nil {
					t.Fatal(err)
				}
				if err := a1.Prepare(&p1m); err != nil {
					t.Fatal(err)
				}
				if !p0m.Prepared() || !p1m.Prepared() || m0.Prepared() {
					t.Fatalf("tick %d: Prepared() = %v, %v (copies %v)", tick, p0m.Prepared(), p1m.Prepared(), m0.Prepared())
				}
				if tick == 100 {
					// A repeated set-up (e.g. after the peer restarted) starts a
					// new generation: this tick's prepared material is stale.
					u0, u1, err := sess.FixedUShares(prm)
					if err != nil {
						t.Fatal(err)
					}
					if err := FixedSetup(a0, a1, u0, u1); err != nil {
						t.Fatal(err)
					}
				} else {
					prepared++
				}
				if err := RunTick(a0, a1, y0, y1, p0m, p1m, ua); err != nil {
					t.Fatalf("tick %d: %v", tick, err)
				}
				if err := RunTick(b0, b1, y0, y1, m0, m1, ub); err != nil {
					t.Fatalf("tick %d: %v", tick, err)
				}
				if !ua.Equal(ub) {
					t.Fatalf("tick %d: prepared ū %s, unprepared %s", tick, f.String(ua.Data[0]), f.String(ub.Data[0]))
				}
				if !a0.State().Equal(b0.State()) || !a1.State().Equal(b1.State()) {
					t.Fatalf("tick %d: state shares differ", tick)
				}
			}
			if prepared != 199 {
				t.Fatalf("prepared %d ticks", prepared)
			}
		})
	}
	f := mustField(t, PresetM127)
	p0, _, d, sess := twoParties(t, f, PerTick, false)
	m0, _ := tickMaterial(t, d, sess, seeded(8))
	if err := p0.Prepare(&m0); err != nil || m0.Prepared() {
		t.Fatalf("per-tick Prepare: err %v, prepared %v", err, m0.Prepared())
	}
}

// TestRecycleMaterial: a recycled material keeps its storage, drops what
// Prepare computed (a tick on a recycled, refilled and unprepared material
// gives the result of fresh material, not of the stale preparation), and
// Prepare on it reuses its storage too; a change of shape or variant gives
// the right shapes.
func TestRecycleMaterial(t *testing.T) {
	f := mustField(t, PresetM127)
	a0, a1, b0, b1, d, sess := twinPairs(t, f)
	prm := a0.Params()
	ry := seeded(9)
	ua, ub := NewMatrix(prm.M, 1), NewMatrix(prm.M, 1)
	r0, r1 := tickMaterial(t, d, sess, ry) // the materials recycled every tick
	for tick := range 20 {
		if err := a0.Prepare(&r0); err != nil {
			t.Fatal(err)
		}
		if err := a1.Prepare(&r1); err != nil {
			t.Fatal(err)
		}
		pre, v := &r0.pre.Data[0], &r0.Triple.V.Data[0]
		r0.Recycle(prm)
		r1.Recycle(prm)
		if r0.Prepared() || r1.Prepared() {
			t.Fatal("a recycled material is still prepared")
		}
		if &r0.Triple.V.Data[0] != v {
			t.Fatal("Recycle did not keep the storage")
		}
		m0, m1 := tickMaterial(t, d, sess, ry)
		refill(r0, m0)
		refill(r1, m1)
		if tick%2 == 1 { // every other tick prepared again, in the old storage
			if err := a0.Prepare(&r0); err != nil {
				t.Fatal(err)
			}
			if err := a1.Prepare(&r1); err != nil {
				t.Fatal(err)
			}
			if &r0.pre.Data[0] != pre {
				t.Fatal("Prepare on a recycled material did not reuse its storage")
			}
		}
		y0, y1 := mustShare(t, f, ry, mustRandomMatrix(t, f, ry, prm.P, 1))
		if err := RunTick(a0, a1, y0, y1, r0, r1, ua); err != nil {
			t.Fatalf("tick %d: %v", tick, err)
		}
		if a0.UsedPrepared() != (tick%2 == 1) {
			t.Fatalf("tick %d: UsedPrepared %v", tick, a0.UsedPrepared())
		}
		if err := RunTick(b0, b1, y0, y1, m0, m1, ub); err != nil {
			t.Fatalf("tick %d: %v", tick, err)
		}
		if !ua.Equal(ub) || !a0.State().Equal(b0.State()) || !a1.State().Equal(b1.State()) {
			t.Fatalf("tick %d: a recycled material's tick differs from fresh material's", tick)
		}
	}
	// Shapes follow the parameters: per-tick has U, fixed-mask none.
	pt := pendulumParams(f, PerTick)
	var m TickMaterial
	m.Recycle(pt)
	r, c := pt.PhiShape()
	if m.Triple.U.Rows != r || m.Triple.U.Cols != c || len(m.Triple.V.Data) != c || len(m.Triple.W.Data) != r ||
		len(m.Mask.M.Data) != pt.N || len(m.Mask.L.Data) != pt.N {
		t.Fatalf("per-tick shapes: U %dx%d V %d W %d M %d L %d", m.Triple.U.Rows, m.Triple.U.Cols,
			len(m.Triple.V.Data), len(m.Triple.W.Data), len(m.Mask.M.Data), len(m.Mask.L.Data))
	}
	big := pt
	big.N = pt.N + 2
	m.Recycle(big)
	if br, _ := big.PhiShape(); len(m.Triple.W.Data) != br || len(m.Mask.M.Data) != big.N {
		t.Fatalf("after a change of shape: W %d M %d", len(m.Triple.W.Data), len(m.Mask.M.Data))
	}
	m.Recycle(prm)
	if m.Triple.U.Data != nil {
		t.Fatal("fixed-mask material has U after Recycle")
	}
}

// refill copies m's entries into the recycled r.
func refill(r, m TickMaterial) {
	for _, p := range [][2]Matrix{{r.Triple.U, m.Triple.U}, {r.Triple.V, m.Triple.V}, {r.Triple.W, m.Triple.W},
		{r.Mask.M, m.Mask.M}, {r.Mask.L, m.Mask.L}} {
		copy(p[0].Data, p[1].Data)
	}
}

// TestOutputThenTruncStart: Output followed by TruncStart (the output share
// computed and sent before the state rows) gives, in both variants and with
// prepared material, shares of exactly Φ̄ ξ_t in every row of the product
// (the output rows from Output, the state rows from TruncStart, checked
// against the product of the reconstructed Φ̄ and ξ_t), and the same output
// and state shares as Multiply on a twin pair; the halves refuse to run out
// of order.
func TestOutputThenTruncStart(t *testing.T) {
	f := mustField(t, PresetM127)
	for _, tc := range []struct {
		name     string
		v        Variant
		prepared bool
	}{{"per-tick", PerTick, false}, {"fixed", FixedMask, false}, {"fixed-prepared", FixedMask, true}} {
		t.Run(tc.name, func(t *testing.T) {
			a0, a1, d, sess := twoParties(t, f, tc.v, false)
			b0, b1, _, _ := twoParties(t, f, tc.v, false)
			prm := a0.Params()
			r, c := prm.PhiShape()
			phi, xi, want, z := NewMatrix(r, c), NewMatrix(c, 1), NewMatrix(r, 1), NewMatrix(r, 1)
			f.Reconst(phi, b0.phi, b1.phi)
			ry := seeded(9)
			ua, ub := NewMatrix(prm.M, 1), NewMatrix(prm.M, 1)
			for tick := range 100 {
				y0, y1 := mustShare(t, f, ry, mustRandomMatrix(t, f, ry, prm.P, 1))
				m0, m1 := tickMaterial(t, d, sess, ry)
				if tc.prepared {
					if err := b0.Prepare(&m0); err != nil {
						t.Fatal(err)
					}
					if err := b1.Prepare(&m1); err != nil {
						t.Fatal(err)
					}
				}
				msg0, err := b0.Begin(y0, m0)
				if err != nil {
					t.Fatal(err)
				}
				msg1, err := b1.Begin(y1, m1)
				if err != nil {
					t.Fatal(err)
				}
				f.Reconst(xi, b0.xi, b1.xi)
				f.MatMul(want, phi, xi)
				if _, err := b0.TruncStart(); !errors.Is(err, ErrStage) {
					t.Fatalf("TruncStart before Output: %v, want ErrStage", err)
				}
				u0, err := b0.Output(msg1)
				if err != nil {
					t.Fatal(err)
				}
				u1, err := b1.Output(msg0)
				if err != nil {
					t.Fatal(err)
				}
				f.Reconst(ub, u0, u1)
				if !ub.Equal(want.RowRange(prm.N, r)) {
					t.Fatalf("tick %d: ū from Output %s, want %s", tick, f.String(ub.Data[0]), f.String(want.Data[prm.N]))
				}
				if err := b1.Finish(&TruncMsg{Y: NewMatrix(prm.N, 1)}); !errors.Is(err, ErrStage) {
					t.Fatalf("Finish between Output and TruncStart: %v, want ErrStage", err)
				}
				if _, err := b0.Output(msg1); !errors.Is(err, ErrStage) {
					t.Fatalf("Output twice: %v, want ErrStage", err)
				}
				tr, err := b0.TruncStart()
				if err != nil || tr == nil {
					t.Fatalf("P0 TruncStart: %v, %v", tr, err)
				}
				if tr1, err := b1.TruncStart(); err != nil || tr1 != nil {
					t.Fatalf("P1 TruncStart: %v, %v (P1 sends no truncation message)", tr1, err)
				}
				f.Reconst(z, b0.z, b1.z)
				if !z.Equal(want) {
					t.Fatalf("tick %d: the product's rows are not shares of Φ̄ ξ", tick)
				}
				if tc.prepared != b0.UsedPrepared() || tc.prepared != b1.UsedPrepared() {
					t.Fatalf("tick %d: used prepared %v, %v", tick, b0.UsedPrepared(), b1.UsedPrepared())
				}
				if err := b0.Finish(nil); err != nil {
					t.Fatal(err)
				}
				if err := b1.Finish(tr); err != nil {
					t.Fatal(err)
				}
				// The twin pair through Multiply, on the same material.
				if err := RunTick(a0, a1, y0, y1, m0, m1, ua); err != nil {
					t.Fatalf("tick %d: %v", tick, err)
				}
				if !ua.Equal(ub) || !a0.State().Equal(b0.State()) || !a1.State().Equal(b1.State()) {
					t.Fatalf("tick %d: Multiply and Output + TruncStart differ", tick)
				}
			}
		})
	}
}
