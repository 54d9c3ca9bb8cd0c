package mpc

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
)

// uniformFloat returns a float64 uniform in [lo, hi) from r.
func uniformFloat(r interface{ Read([]byte) (int, error) }, lo, hi float64) float64 {
	var b [8]byte
	r.Read(b[:])
	u := float64(uint64(b[0])|uint64(b[1])<<8|uint64(b[2])<<16|uint64(b[3])<<24|
		uint64(b[4])<<32|uint64(b[5])<<40|uint64(b[6])<<48) / 0x1p56
	return lo + (hi-lo)*u
}

// TestLocalLoopMatchesClear runs Protocol 3 (LocalLoop: sharing, dealer, both
// parties, actuator) beside the encoded controller computed in the clear, for
// both mask variants, with and without seed compression, over both presets,
// on random measurements. Each tick:
//
//   - ū from the parties equals the clear Φ̄ ξ exactly, and u = Dcd(ū, 2l);
//   - the new state reconstructs to exactly round((X + R') / 2^l), with X the
//     clear pre-truncation state and R' = L0 + L1 the dealer's mask for the
//     tick (from loop.Last), which is round(X / 2^l) + W, W in {-1, 0, 1};
//   - X stays in Z<κ>, the precondition of Protocol 2;
//
// and the clear controller then advances with that state, so the two runs
// stay in lockstep for hundreds of ticks.
func TestLocalLoopMatchesClear(t *testing.T) {
	const ticks = 300
	for _, name := range []string{PresetM127, PresetP25519} {
		f := mustField(t, name)
		for _, v := range []Variant{PerTick, FixedMask} {
			for _, compress := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%v/compress=%v", name, v, compress), func(t *testing.T) {
					prm := pendulumParams(f, v)
					phi, err := f.EcdMatrix(pendulumPhi(), prm.K, prm.L)
					if err != nil {
						t.Fatal(err)
					}
					x0, err := f.EcdVec([]float64{1.5, -2.25, 0.125}, prm.K, prm.L)
					if err != nil {
						t.Fatal(err)
					}
					sess := NewSession([32]byte{'l', 'o', 'o', 'p'})
					loop, err := NewLocalLoop(prm, phi, x0, seeded(111), sess, compress)
					if err != nil {
						t.Fatal(err)
					}
					clear := NewClearController(prm, phi, x0)
					ry := seeded(112)
					ws := map[int64]int{}
					xf := []float64{1.5, -2.25, 0.125} // the float controller, for a sanity bound
					k := pendulumGains
					for tick := range ticks {
						y := []float64{uniformFloat(ry, -30, 30), uniformFloat(ry, -10, 10)}
						u, err := loop.Step(y)
						if err != nil {
							t.Fatalf("tick %d: %v", tick, err)
						}
						yEnc, err := f.EcdVec(y, prm.K, prm.L)
						if err != nil {
							t.Fatal(err)
						}
						uBar, X := clear.Step(yEnc)
						if got := loop.EncodedOutput(); !got.Equal(uBar) {
							t.Fatalf("tick %d: ū = %s, clear Φ̄ξ = %s", tick, f.String(got.Data[0]), f.String(uBar.Data[0]))
						}
						if want := f.Dcd(uBar.Data[0], 2*prm.L); u[0] != want {
							t.Fatalf("tick %d: u = %v, want Dcd(ū, 2l) = %v", tick, u[0], want)
						}

						// R' of this tick from the dealer's item.
						it := loop.Last
						if compress != (it.P0 == nil) {
							t.Fatalf("tick %d: compress=%v but item P0 present=%v", tick, compress, it.P0 != nil)
						}
						m0, err := it.Material(prm, 0, sess.P0Seed())
						if err != nil {
							t.Fatal(err)
						}
						rp := f.ReconstNew(m0.Mask.L, it.P1.Mask.L)
						s0, s1 := loop.StateShares()
						state := f.ReconstNew(s0, s1)
						for i := range X.Data {
							if !f.InSigned(X.Data[i], prm.Kappa()) {
								t.Fatalf("tick %d: X[%d] = %s leaves Z<κ>", tick, i, f.String(X.Data[i]))
							}
							want := roundBig(new(big.Int).Add(centeredBig(f, X.Data[i]), centeredBig(f, rp.Data[i])), prm.L)
							if got := centeredBig(f, state.Data[i]); got.Cmp(want) != 0 {
								t.Fatalf("tick %d: state[%d] = %s, want round((X+R')/2^l) = %s", tick, i, got, want)
							}
							w := new(big.Int).Sub(want, centeredBig(f, f.RoundShift(X.Data[i], prm.L)))
							if !w.IsInt64() || w.Int64() < -1 || w.Int64() > 1 {
								t.Fatalf("tick %d: W = %s", tick, w)
							}
							ws[w.Int64()]++
						}
						clear.Advance(state)

						// The float controller the encoding approximates.
						up := k[2]*xf[0] + k[3]*xf[1] + k[4]*xf[2] + k[0]*y[0] + k[1]*y[1]
						xf = []float64{-50 * y[0], -50 * y[1], up}
						if d := math.Abs(u[0] - up); d > 0.05 {
							t.Fatalf("tick %d: u = %v, float controller %v", tick, u[0], up)
						}
					}
					if !clear.State().Equal(f.ReconstNew(loop.StateShares())) {
						t.Errorf("clear state and shared state differ at the end")
					}
					t.Logf("W counts over %d ticks: %v", ticks, ws)
				})
			}
		}
	}
}

// TestLocalLoopErrors: a measurement outside Q<k,l> is refused with the
// index, and the loop continues afterwards.
func TestLocalLoopErrors(t *testing.T) {
	f := mustField(t, PresetM127)
	prm := pendulumParams(f, PerTick)
	phi, err := f.EcdMatrix(pendulumPhi(), prm.K, prm.L)
	if err != nil {
		t.Fatal(err)
	}
	loop, err := NewLocalLoop(prm, phi, NewMatrix(3, 1), seeded(113), NewSession([32]byte{}), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loop.Step([]float64{0, 300}); err == nil || !strings.Contains(err.Error(), "entry 1") {
		t.Errorf("Step with an out-of-range measurement: %v", err)
	}
	if _, err := loop.Step([]float64{0}); err == nil {
		t.Errorf("Step with one measurement: no error")
	}
	if u, err := loop.Step([]float64{0, 0}); err != nil || u[0] != 0 {
		t.Errorf("Step after errors = %v, %v", u, err)
	}
	if _, err := NewLocalLoop(Params{Field: f}, phi, NewMatrix(3, 1), seeded(113), NewSession([32]byte{}), false); err == nil {
		t.Errorf("NewLocalLoop with invalid params: no error")
	}
}
