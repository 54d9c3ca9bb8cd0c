package mpc

import "fmt"

// The two-hop tick (docs/two-hop-design.md). Protocol 1 opens
// T = ξ - V, ξ = [x̄_t; ȳ_t]. Its state rows T_x = x̄_t - V_x are known to the
// parties as shares once tick t-1 has ended and they hold tick t's item, so
// they open them between ticks (PreBegin, sent as KindPreT). Its measurement
// rows T_y = ȳ_t - V_y come from the sensor, which learns V_y (MaskRows of
// both parties) and sends T_y itself. A party then has everything the
// other party's Begin would have sent it (PeerTInto): its share of ȳ_t is
// UnmaskInto's, and Begin and Multiply run unchanged, with outputs and
// state bit-identical to the three-hop tick's for the same item (the shares
// Multiply computes depend on the opened T and the material only).

// PreBegin computes, before the measurement, the state part of Begin's
// Protocol 1 message for the item mat: [[T_x]]_i = [[x̄_t]]_i - [[V_x]]_i
// (n x 1) and, in the per-tick variant, [[S]]_i = [[Φ̄]]_i - [[U]]_i. It does
// not change the party's stage (a tick in progress is not disturbed). The
// message aliases buffers valid until the next PreBegin.
func (p *Party) PreBegin(mat TickMaterial) (MulMsg, error) {
	if !p.Ready() {
		return MulMsg{}, fmt.Errorf("%w: fixed-mask set-up not done", ErrStage)
	}
	if err := p.checkMaterial(mat); err != nil {
		return MulMsg{}, err
	}
	n := p.prm.N
	p.preT = reshaped(p.preT, n, 1)
	p.f.MulOpen(p.preT, p.x, mat.Triple.V.RowRange(0, n))
	msg := MulMsg{T: p.preT}
	if p.prm.Variant == PerTick {
		r, c := p.prm.PhiShape()
		p.preS = reshaped(p.preS, r, c)
		p.f.MulOpen(p.preS, p.phi, mat.Triple.U)
		msg.S = p.preS
	}
	return msg, nil
}

// MaskRows returns the party's share of V_y, the measurement rows of the
// item's V (p x 1, aliasing mat): what the party sends the sensor. It never
// includes the state rows.
func (p *Party) MaskRows(mat TickMaterial) (Matrix, error) {
	if err := p.checkMaterial(mat); err != nil {
		return Matrix{}, err
	}
	return mat.Triple.V.RowRange(p.prm.N, p.prm.N+p.prm.P), nil
}

// UnmaskInto sets dst (p x 1) to the party's share of ȳ_t given the
// sensor's T_y = ȳ_t - V_y: P0's is T_y + [[V_y]]_0, P1's [[V_y]]_1, a valid
// sharing of ȳ_t. With it, Begin's message has T_y in P0's measurement rows
// and zeros in P1's.
func (p *Party) UnmaskInto(dst, ty Matrix, mat TickMaterial) error {
	if err := p.checkMaterial(mat); err != nil {
		return err
	}
	if !ty.isCol(p.prm.P) || !dst.isCol(p.prm.P) {
		return fmt.Errorf("%w: masked measurement is %dx%d, want %dx1", ErrDimension, ty.Rows, ty.Cols, p.prm.P)
	}
	vy := mat.Triple.V.RowRange(p.prm.N, p.prm.N+p.prm.P)
	if p.id == 0 {
		p.f.MatAdd(dst, ty, vy)
	} else {
		copy(dst.Data, vy.Data)
	}
	return nil
}

// PeerTInto sets dst ((n+p) x 1) to the T of the other party's Protocol 1
// message, given its [[T_x]] (its PreBegin) and T_y: [peerTx; T_y] from P0,
// [peerTx; 0] from P1, as its Begin with its UnmaskInto share computes.
func (p *Party) PeerTInto(dst, peerTx, ty Matrix) error {
	n, q := p.prm.N, p.prm.P
	switch {
	case !peerTx.isCol(n):
		return fmt.Errorf("%w: T_x is %dx%d, want %dx1", ErrPeer, peerTx.Rows, peerTx.Cols, n)
	case !ty.isCol(q):
		return fmt.Errorf("%w: masked measurement is %dx%d, want %dx1", ErrDimension, ty.Rows, ty.Cols, q)
	case !dst.isCol(n + q):
		return fmt.Errorf("%w: T is %dx%d, want %dx1", ErrDimension, dst.Rows, dst.Cols, n+q)
	}
	copy(dst.Data, peerTx.Data)
	if p.id == 1 { // the peer is P0
		copy(dst.Data[n:], ty.Data)
	} else {
		clear(dst.Data[n:])
	}
	return nil
}

// isCol reports whether m is a rows x 1 column with its data.
func (m Matrix) isCol(rows int) bool { return m.Rows == rows && m.Cols == 1 && len(m.Data) == rows }
