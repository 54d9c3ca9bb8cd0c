package mpc

import (
	"fmt"
	"io"
)

// LocalLoop runs the whole of Protocol 3 in one process: the client's
// encoding and sharing, a dealer, P0 and P1 exchanging their messages
// directly, and the actuator's reconstruction. It is what `duet sim` runs and
// the reference the networked pipeline is tested against.
type LocalLoop struct {
	prm      Params
	f        *Field
	p0, p1   *Party
	dealer   *Dealer
	compress bool
	p0Seed   [32]byte
	rng      io.Reader

	yEnc, y0, y1, u Matrix
	uf              []float64

	// Last is the item used by the latest Step (for tests and audits).
	Last Item
}

// NewLocalLoop shares the encoded Φ̄ and x̄_0 (clear, from the client) and
// performs the set-up. rng supplies all randomness but the items' serials
// (ItemSerial: the Dealer's start time and 16 bits of crypto/rand), so with
// compress P0's shares differ from run to run; every opened and reconstructed
// value replays bit for bit.
func NewLocalLoop(prm Params, phi, x0 Matrix, rng io.Reader, sess *Session, compress bool) (*LocalLoop, error) {
	if err := prm.Validate(); err != nil {
		return nil, err
	}
	f := prm.Field
	phi0, phi1, err := f.Share(rng, phi)
	if err != nil {
		return nil, err
	}
	x00, x01, err := f.Share(rng, x0)
	if err != nil {
		return nil, err
	}
	l := &LocalLoop{prm: prm, f: f, rng: rng, compress: compress, p0Seed: sess.P0Seed()}
	if l.p0, err = NewParty(prm, 0, phi0, x00); err != nil {
		return nil, err
	}
	if l.p1, err = NewParty(prm, 1, phi1, x01); err != nil {
		return nil, err
	}
	if prm.Variant == FixedMask {
		u0, u1, err := sess.FixedUShares(prm)
		if err != nil {
			return nil, err
		}
		if err := FixedSetup(l.p0, l.p1, u0, u1); err != nil {
			return nil, err
		}
	}
	if l.dealer, err = NewDealer(prm, sess, compress); err != nil {
		return nil, err
	}
	l.yEnc, l.y0, l.y1 = NewMatrix(prm.P, 1), NewMatrix(prm.P, 1), NewMatrix(prm.P, 1)
	l.u = NewMatrix(prm.M, 1)
	l.uf = make([]float64, prm.M)
	return l, nil
}

// FixedSetup runs the fixed-mask set-up between two in-process parties.
func FixedSetup(p0, p1 *Party, u0, u1 Matrix) error {
	s0, err := p0.FixedSetupMsg(u0)
	if err != nil {
		return err
	}
	s1, err := p1.FixedSetupMsg(u1)
	if err != nil {
		return err
	}
	if err := p0.FixedSetupFinish(s0, s1); err != nil {
		return err
	}
	return p1.FixedSetupFinish(s1, s0)
}

// Material returns party id's material of an item.
func (it Item) Material(prm Params, id int, p0Seed [32]byte) (TickMaterial, error) {
	if id == 1 {
		return it.P1, nil
	}
	if it.P0 != nil {
		return *it.P0, nil
	}
	return ExpandP0(prm, p0Seed, it.Nonce)
}

// RunTick runs one tick between two in-process parties and returns the
// reconstructed ū_t into u (m x 1).
func RunTick(p0, p1 *Party, y0, y1 Matrix, m0, m1 TickMaterial, u Matrix) error {
	msg0, err := p0.Begin(y0, m0)
	if err != nil {
		return fmt.Errorf("P0: %w", err)
	}
	msg1, err := p1.Begin(y1, m1)
	if err != nil {
		return fmt.Errorf("P1: %w", err)
	}
	u0, tr, err := p0.Multiply(msg1)
	if err != nil {
		return fmt.Errorf("P0: %w", err)
	}
	u1, _, err := p1.Multiply(msg0)
	if err != nil {
		return fmt.Errorf("P1: %w", err)
	}
	p0.prm.Field.Reconst(u, u0, u1)
	if err := p0.Finish(nil); err != nil {
		return fmt.Errorf("P0: %w", err)
	}
	if err := p1.Finish(tr); err != nil {
		return fmt.Errorf("P1: %w", err)
	}
	return nil
}

// Step runs one tick on the measurement y (real units) and returns u_t =
// Dcd(ū_t, 2l). The returned slice is reused by the next Step.
func (l *LocalLoop) Step(y []float64) ([]float64, error) {
	f := l.f
	if err := f.EcdInto(l.yEnc.Data, y, l.prm.K, l.prm.L); err != nil {
		return nil, fmt.Errorf("measurement %w", err)
	}
	if err := f.ShareInto(l.rng, l.yEnc, l.y0, l.y1); err != nil {
		return nil, err
	}
	it, err := l.dealer.Next(l.rng)
	if err != nil {
		return nil, err
	}
	l.Last = it
	m0, err := it.Material(l.prm, 0, l.p0Seed)
	if err != nil {
		return nil, err
	}
	// As the party service does, off the critical path (fixed mask only).
	m1 := it.P1
	if err := l.p0.Prepare(&m0); err != nil {
		return nil, err
	}
	if err := l.p1.Prepare(&m1); err != nil {
		return nil, err
	}
	if err := RunTick(l.p0, l.p1, l.y0, l.y1, m0, m1, l.u); err != nil {
		return nil, err
	}
	f.DcdInto(l.uf, l.u.Data, 2*l.prm.L)
	return l.uf, nil
}

// StateShares returns copies of both parties' state shares (tests only: a
// real deployment never holds both).
func (l *LocalLoop) StateShares() (Matrix, Matrix) { return l.p0.State(), l.p1.State() }

// EncodedOutput returns the reconstructed ū of the latest Step.
func (l *LocalLoop) EncodedOutput() Matrix { return l.u.Clone() }

// ClearController is the encoded controller computed in the clear: the
// reference the two-party computation must match exactly.
type ClearController struct {
	prm    Params
	phi, x Matrix
	xi, z  Matrix
}

// NewClearController starts from the encoded Φ̄ and x̄_0.
func NewClearController(prm Params, phi, x0 Matrix) *ClearController {
	r, c := prm.PhiShape()
	return &ClearController{prm: prm, phi: phi.Clone(), x: x0.Clone(), xi: NewMatrix(c, 1), z: NewMatrix(r, 1)}
}

// Step computes Φ̄ ξ for ξ = [x̄; ȳ] and returns (ū, X) where X is the
// pre-truncation state rows. The state is not advanced: call Advance.
func (c *ClearController) Step(y Matrix) (u, X Matrix) {
	copy(c.xi.Data, c.x.Data)
	copy(c.xi.Data[c.prm.N:], y.Data)
	c.prm.Field.MatMul(c.z, c.phi, c.xi)
	return c.z.RowRange(c.prm.N, c.z.Rows).Clone(), c.z.RowRange(0, c.prm.N).Clone()
}

// Advance sets the state to x.
func (c *ClearController) Advance(x Matrix) { copy(c.x.Data, x.Data) }

// State returns a copy of the state.
func (c *ClearController) State() Matrix { return c.x.Clone() }

// RoundShift returns round(v / 2^l) = floor((v + 2^(l-1)) / 2^l) for the
// centered value v of a, exactly (protocol.md §2: never through float64),
// for l >= 0. The integer arithmetic cannot wrap: |v| <= (q-1)/2 < 2^254.
func (f *Field) RoundShift(a Elem, l int) Elem {
	switch {
	case l <= 0:
		return a
	case l > 255:
		return Elem{} // |v| < 2^(l-1)
	}
	var h Elem // 2^(l-1)
	h[(l-1)/64] = 1 << uint((l-1)%64)
	if !f.IsNeg(a) {
		return shrN(addRaw(a, h), l)
	}
	// v = -m with m > 0. If m <= h then 0 <= v + h < 2^l and the result is
	// 0; otherwise it is -ceil((m - h) / 2^l).
	m := f.Neg(a)
	if cmp(m, h) <= 0 {
		return Elem{}
	}
	d := subRaw(m, h)
	c := shrN(d, l)
	if lowBitsNonZero(d, l) {
		c = addRaw(c, Elem{1})
	}
	return f.Neg(c)
}
