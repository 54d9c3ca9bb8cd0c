package mpc

import (
	"errors"
	"fmt"
	"testing"
)

// TestTwoHopMatchesThreeHop runs the same ticks (same state, same items,
// same measurements) the three-hop way (Begin, exchange, Multiply, Finish)
// and the two-hop way (PreBegin exchanged between ticks, the sensor's T_y,
// UnmaskInto, Begin, PeerTInto, Multiply, Finish) and requires every output
// share, truncation message and state share to be bit-identical.
func TestTwoHopMatchesThreeHop(t *testing.T) {
	for _, v := range []Variant{PerTick, FixedMask} {
		for _, compress := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/compress=%v", v, compress), func(t *testing.T) {
				f := mustField(t, PresetM127)
				a0, a1, da, sess := twoParties(t, f, v, compress)
				b0, b1, db, _ := twoParties(t, f, v, compress)
				// The same items from both dealers: the same serials too.
				da.Resume(ItemSerial{Instance: 1})
				db.Resume(ItemSerial{Instance: 1})
				prm := a0.Params()
				ra, rb, ry := seeded(7), seeded(7), seeded(9)
				for tick := 0; tick < 20; tick++ {
					ma0, ma1 := tickMaterial(t, da, sess, ra)
					mb0, mb1 := tickMaterial(t, db, sess, rb)
					y, err := f.RandomMatrix(ry, prm.P, 1)
					if err != nil {
						t.Fatal(err)
					}
					// Three hops: a random sharing of y, as the sensor sends.
					y0, y1 := mustShare(t, f, ry, y)
					msgA0, err := a0.Begin(y0, ma0)
					if err != nil {
						t.Fatal(err)
					}
					msgA1, err := a1.Begin(y1, ma1)
					if err != nil {
						t.Fatal(err)
					}
					ua0, trA, err := a0.Multiply(msgA1)
					if err != nil {
						t.Fatal(err)
					}
					ua1, _, err := a1.Multiply(msgA0)
					if err != nil {
						t.Fatal(err)
					}
					ua0, ua1 = ua0.Clone(), ua1.Clone()
					trAY := trA.Y.Clone()

					// Two hops.
					pre0, err := b0.PreBegin(mb0)
					if err != nil {
						t.Fatal(err)
					}
					pre0 = MulMsg{T: pre0.T.Clone(), S: cloneOrZero(pre0.S)}
					pre1, err := b1.PreBegin(mb1)
					if err != nil {
						t.Fatal(err)
					}
					vy0, err := b0.MaskRows(mb0)
					if err != nil {
						t.Fatal(err)
					}
					vy1, err := b1.MaskRows(mb1)
					if err != nil {
						t.Fatal(err)
					}
					// The sensor: T_y = ȳ - (V_y0 + V_y1).
					ty := NewMatrix(prm.P, 1)
					f.MatSub(ty, y, f.ReconstNew(vy0, vy1))
					z0, z1 := NewMatrix(prm.P, 1), NewMatrix(prm.P, 1)
					if err := b0.UnmaskInto(z0, ty, mb0); err != nil {
						t.Fatal(err)
					}
					if err := b1.UnmaskInto(z1, ty, mb1); err != nil {
						t.Fatal(err)
					}
					if got := f.ReconstNew(z0, z1); !got.Equal(y) {
						t.Fatalf("tick %d: unmasked shares reconstruct %v, want %v", tick, got.Data, y.Data)
					}
					own0, err := b0.Begin(z0, mb0)
					if err != nil {
						t.Fatal(err)
					}
					own1, err := b1.Begin(z1, mb1)
					if err != nil {
						t.Fatal(err)
					}
					peerFor0, peerFor1 := MulMsg{T: NewMatrix(prm.N+prm.P, 1), S: pre1.S}, MulMsg{T: NewMatrix(prm.N+prm.P, 1), S: pre0.S}
					if err := b0.PeerTInto(peerFor0.T, pre1.T, ty); err != nil {
						t.Fatal(err)
					}
					if err := b1.PeerTInto(peerFor1.T, pre0.T, ty); err != nil {
						t.Fatal(err)
					}
					// What each party synthesized is exactly what the other's Begin sent.
					if !peerFor0.T.Equal(own1.T) || !peerFor1.T.Equal(own0.T) {
						t.Fatalf("tick %d: synthesized T differs from the other party's Begin", tick)
					}
					ub0, trB, err := b0.Multiply(peerFor0)
					if err != nil {
						t.Fatal(err)
					}
					ub1, _, err := b1.Multiply(peerFor1)
					if err != nil {
						t.Fatal(err)
					}
					if !ub0.Equal(ua0) || !ub1.Equal(ua1) || !trB.Y.Equal(trAY) {
						t.Fatalf("tick %d: output or truncation shares differ from the three-hop tick's", tick)
					}
					for _, e := range []error{a0.Finish(nil), a1.Finish(trA), b0.Finish(nil), b1.Finish(trB)} {
						if e != nil {
							t.Fatal(e)
						}
					}
					if !a0.StateView().Equal(b0.StateView()) || !a1.StateView().Equal(b1.StateView()) {
						t.Fatalf("tick %d: state shares differ", tick)
					}
				}
			})
		}
	}
}

func cloneOrZero(m Matrix) Matrix {
	if m.Data == nil {
		return m
	}
	return m.Clone()
}

// TestTwoHopErrors: wrong shapes are errors naming the problem, and
// PreBegin leaves a tick in progress undisturbed.
func TestTwoHopErrors(t *testing.T) {
	f := mustField(t, PresetM127)
	p0, p1, d, sess := twoParties(t, f, FixedMask, false)
	prm := p0.Params()
	r := seeded(3)
	m0, m1 := tickMaterial(t, d, sess, r)
	if err := p0.UnmaskInto(NewMatrix(prm.P, 1), NewMatrix(prm.P+1, 1), m0); !errors.Is(err, ErrDimension) {
		t.Errorf("UnmaskInto with a long T_y: %v, want ErrDimension", err)
	}
	if err := p1.PeerTInto(NewMatrix(prm.N+prm.P, 1), NewMatrix(prm.N+1, 1), NewMatrix(prm.P, 1)); !errors.Is(err, ErrPeer) {
		t.Errorf("PeerTInto with a long T_x: %v, want ErrPeer", err)
	}
	if _, err := p0.PreBegin(TickMaterial{}); !errors.Is(err, ErrMaterial) {
		t.Errorf("PreBegin without material: %v, want ErrMaterial", err)
	}
	if _, err := p0.MaskRows(TickMaterial{}); !errors.Is(err, ErrMaterial) {
		t.Errorf("MaskRows without material: %v, want ErrMaterial", err)
	}
	vy, err := p0.MaskRows(m0)
	if err != nil || vy.Rows != prm.P || vy.Cols != 1 {
		t.Fatalf("MaskRows = %dx%d, %v; want %dx1", vy.Rows, vy.Cols, err, prm.P)
	}
	// A tick begun, PreBegin for the next item, then the tick completes
	// as if PreBegin had not run.
	y0, y1 := mustShare(t, f, r, NewMatrix(prm.P, 1))
	msg0, err := p0.Begin(y0, m0)
	if err != nil {
		t.Fatal(err)
	}
	msg0 = MulMsg{T: msg0.T.Clone()}
	msg1, err := p1.Begin(y1, m1)
	if err != nil {
		t.Fatal(err)
	}
	n0, _ := tickMaterial(t, d, sess, r)
	if _, err := p0.PreBegin(n0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p0.Multiply(msg1); err != nil {
		t.Fatalf("Multiply after a PreBegin: %v", err)
	}
	if _, _, err := p1.Multiply(msg0); err != nil {
		t.Fatal(err)
	}
}
