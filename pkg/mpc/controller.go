package mpc

import (
	"errors"
	"fmt"
)

// Protocol 3 (protocol.md §6): the two-party controller
// x_{t+1} = A x_t + B y_t, u_t = C x_t + D y_t with Φ = [[A, B], [C, D]].

// Variant selects how Protocol 1 masks the constant operand Φ̄.
type Variant uint8

const (
	// PerTick is the paper's form: a fresh triple (U, V, W) every tick; the
	// parties exchange S = Φ̄ - U and T = ξ - V each tick.
	PerTick Variant = iota
	// FixedMask opens S = Φ̄ - U once at set-up and uses a fresh (V_t, U V_t)
	// each tick, so only T travels (SecureML's trick for a constant operand).
	FixedMask
)

func (v Variant) String() string {
	if v == FixedMask {
		return "fixed"
	}
	return "per-tick"
}

// ParseVariant accepts "per-tick" and "fixed" (not "": a variable or flag
// set empty by mistake is refused, not taken as the default).
func ParseVariant(s string) (Variant, error) {
	switch s {
	case "per-tick":
		return PerTick, nil
	case "fixed":
		return FixedMask, nil
	}
	return 0, fmt.Errorf("%w: mask variant %q, want per-tick or fixed", ErrParams, s)
}

// Params are the public parameters of one control loop.
type Params struct {
	Field   *Field
	N, M, P int // state, input and output dimensions
	K, L    int // Q<k,l>
	Lambda  int // statistical security of Protocol 2
	Variant Variant
}

// Kappa is κ = floor(log2 q) - λ - 1: truncation inputs must lie in Z<κ>.
// q is odd and at least 3, so floor(log2 q) = BitLen - 1.
func (p Params) Kappa() int { return p.Field.BitLen() - 1 - p.Lambda - 1 }

// Validate checks the parameters are usable with the field.
func (p Params) Validate() error {
	switch {
	case p.Field == nil:
		return fmt.Errorf("%w: no field", ErrParams)
	case p.N < 1 || p.M < 1 || p.P < 1:
		return fmt.Errorf("%w: dimensions n=%d m=%d p=%d must be positive", ErrParams, p.N, p.M, p.P)
	case p.K < 2 || p.K > MaxFixedBits || p.L < 1 || p.L >= p.K:
		return fmt.Errorf("%w: Q<%d,%d> needs 2 <= k <= %d and 1 <= l < k", ErrParams, p.K, p.L, MaxFixedBits)
	case p.L > 62:
		return fmt.Errorf("%w: l = %d must be below 63", ErrParams, p.L)
	case p.Lambda < 1:
		return fmt.Errorf("%w: lambda = %d must be positive", ErrParams, p.Lambda)
	case p.Kappa() <= p.L:
		return fmt.Errorf("%w: κ = floor(log2 q) - λ - 1 = %d must exceed l = %d (modulus %s, λ = %d)",
			ErrParams, p.Kappa(), p.L, p.Field.Name(), p.Lambda)
	}
	return nil
}

// PhiShape returns the shape of Φ: (n+m) x (n+p).
func (p Params) PhiShape() (rows, cols int) { return p.N + p.M, p.N + p.P }

// MulMsg is a party's Protocol 1 message of one tick: its shares of S = Φ̄ - U
// (per-tick variant only) and of T = ξ - V.
type MulMsg struct {
	S, T Matrix
}

// TruncMsg is P0's Protocol 2 message of one tick: [[Y]]_0.
type TruncMsg struct {
	Y Matrix
}

// Stage errors.
var (
	ErrStage = errors.New("mpc: protocol step out of order")
	ErrPeer  = errors.New("mpc: malformed message from the other party")
)

type stage uint8

const (
	stageIdle stage = iota
	stageBegun
	stageOutput // Output ran; TruncStart computes the state rows
	stageMultiplied
)

// Party is one party's side of Protocol 3. It is transport-agnostic: each
// tick the caller feeds in the sensor share, the dealer material and the
// other party's messages, and sends on what the step returns:
//
//	msg := p.Begin(y, mat)        // send msg to the other party
//	u, tr := p.Multiply(peerMsg)  // send u to the actuator; P0 sends tr to P1
//	p.Finish(peerTr)              // P1 passes P0's tr; P0 passes nil
//
// Multiply is Output then TruncStart: a caller that sends u before the state
// rows are computed (the tick's critical path then holds the m output rows'
// product only) calls the two itself.
//
// A Party is not safe for concurrent use.
type Party struct {
	prm Params
	id  int
	f   *Field
	inv Elem // 2^-l

	phi Matrix // [[Φ̄]]_i
	x   Matrix // [[x̄_t]]_i

	fixedU, fixedS Matrix // fixed-mask variant: [[U]]_i and the opened S
	// fixedUS is the matrix the prepared fixed-mask product multiplies the
	// opened T by: [[U]]_0 for P0, [[U]]_1 + S for P1. fixedGen counts
	// FixedSetupFinish calls (material prepared under another is not used).
	fixedUS  Matrix
	fixedGen uint64
	// usedPrepared: the latest Multiply used prepared material.
	usedPrepared bool

	st    stage
	mat   TickMaterial
	trMsg TruncMsg // P0's Protocol 2 message, returned by Multiply

	// Scratch, allocated once.
	xi, sOut, tOut, s, t, tmp, z, yOpen, yPeer Matrix
	// The two-hop tick's PreBegin message (twohop.go), allocated on first use.
	preT, preS Matrix
}

// TickMaterial is one party's dealer material for one tick.
type TickMaterial struct {
	Triple TripleShare
	Mask   MaskShare

	// Set by Prepare (fixed mask): S [[V]]_i + [[W]]_i, under set-up
	// generation preGen. Recycle clears prepared and keeps pre's storage.
	pre      Matrix
	preGen   uint64
	prepared bool
}

// Prepared reports whether Prepare precomputed part of this material's
// product.
func (m TickMaterial) Prepared() bool { return m.prepared }

// Recycle readies m to receive another item's material under prm, so that a
// party decodes its items without allocating: each matrix gets its shape for
// prm (U is the zero Matrix in the fixed-mask variant), keeping its storage
// where it already has that shape, and what Prepare computed is dropped.
// Entries are left as they were: the caller overwrites every one
// (codec.MaterialPayload.MaterialInto, Expander.ExpandInto). The zero
// TickMaterial gets new matrices. Material passed to Party.Begin is the
// party's until its next Begin and must not be recycled before.
func (m *TickMaterial) Recycle(prm Params) {
	r, c := prm.PhiShape()
	if prm.Variant == PerTick {
		m.Triple.U = reshaped(m.Triple.U, r, c)
	} else {
		m.Triple.U = Matrix{}
	}
	m.Triple.V = reshaped(m.Triple.V, c, 1)
	m.Triple.W = reshaped(m.Triple.W, r, 1)
	m.Mask.M = reshaped(m.Mask.M, prm.N, 1)
	m.Mask.L = reshaped(m.Mask.L, prm.N, 1)
	m.preGen, m.prepared = 0, false
}

// reshaped is x if it is rows x cols with its entries, else a new matrix.
func reshaped(x Matrix, rows, cols int) Matrix {
	if x.Rows == rows && x.Cols == cols && len(x.Data) == rows*cols {
		return x
	}
	return NewMatrix(rows, cols)
}

// NewParty returns party id (0 or 1) holding shares of Φ̄ and x̄_0. In the
// fixed-mask variant the caller must complete FixedSetup before the first tick.
func NewParty(prm Params, id int, phi, x0 Matrix) (*Party, error) {
	if err := prm.Validate(); err != nil {
		return nil, err
	}
	if id != 0 && id != 1 {
		return nil, fmt.Errorf("%w: party id %d, want 0 or 1", ErrParams, id)
	}
	r, c := prm.PhiShape()
	if phi.Rows != r || phi.Cols != c || len(phi.Data) != r*c {
		return nil, fmt.Errorf("%w: Φ share is %dx%d, want %dx%d", ErrDimension, phi.Rows, phi.Cols, r, c)
	}
	if x0.Rows != prm.N || x0.Cols != 1 || len(x0.Data) != prm.N {
		return nil, fmt.Errorf("%w: x0 share is %dx%d, want %dx1", ErrDimension, x0.Rows, x0.Cols, prm.N)
	}
	f := prm.Field
	p := &Party{prm: prm, id: id, f: f, inv: f.InvPow2(prm.L), phi: phi.Clone(), x: x0.Clone()}
	p.xi = NewMatrix(c, 1)
	p.sOut, p.s = NewMatrix(r, c), NewMatrix(r, c)
	p.tOut, p.t, p.tmp = NewMatrix(c, 1), NewMatrix(c, 1), NewMatrix(c, 1)
	p.z = NewMatrix(r, 1)
	p.yOpen, p.yPeer = NewMatrix(prm.N, 1), NewMatrix(prm.N, 1)
	return p, nil
}

// ID is 0 or 1.
func (p *Party) ID() int { return p.id }

// Params returns the loop parameters.
func (p *Party) Params() Params { return p.prm }

// State returns a copy of the party's share of x̄_t (for persistence).
func (p *Party) State() Matrix { return p.x.Clone() }

// StateView is State without the copy: the party's own matrix, which the
// caller must not modify and which changes with the next Finish or
// SetState.
func (p *Party) StateView() Matrix { return p.x }

// SetState replaces the party's share of x̄_t (restoring a persisted share).
func (p *Party) SetState(x Matrix) error {
	if !x.SameShape(p.x) || len(x.Data) != len(p.x.Data) {
		return fmt.Errorf("%w: state share is %dx%d, want %dx1", ErrDimension, x.Rows, x.Cols, p.prm.N)
	}
	copy(p.x.Data, x.Data)
	p.st = stageIdle
	return nil
}

// FixedSetupMsg is the fixed-mask set-up step: given [[U]]_i it returns
// [[S]]_i = [[Φ̄]]_i - [[U]]_i, to be sent to the other party once.
func (p *Party) FixedSetupMsg(u Matrix) (Matrix, error) {
	if p.prm.Variant != FixedMask {
		return Matrix{}, fmt.Errorf("%w: fixed set-up in the per-tick variant", ErrStage)
	}
	if !u.SameShape(p.phi) || len(u.Data) != len(p.phi.Data) {
		return Matrix{}, fmt.Errorf("%w: U share is %dx%d, want %dx%d", ErrDimension, u.Rows, u.Cols, p.phi.Rows, p.phi.Cols)
	}
	p.fixedU = u.Clone()
	s := NewMatrix(u.Rows, u.Cols)
	p.f.MulOpen(s, p.phi, u)
	return s, nil
}

// FixedSetupFinish reconstructs S = Φ̄ - U from both set-up messages.
func (p *Party) FixedSetupFinish(own, peer Matrix) error {
	if p.fixedU.Data == nil {
		return fmt.Errorf("%w: FixedSetupFinish before FixedSetupMsg", ErrStage)
	}
	if !peer.SameShape(p.phi) || len(peer.Data) != len(p.phi.Data) {
		return fmt.Errorf("%w: S share is %dx%d, want %dx%d", ErrPeer, peer.Rows, peer.Cols, p.phi.Rows, p.phi.Cols)
	}
	p.fixedS = p.f.ReconstNew(own, peer)
	p.fixedUS = p.f.FixedUS(p.id, p.fixedU, p.fixedS)
	p.fixedGen++
	return nil
}

// Prepare precomputes, off the tick's critical path, the part of the
// fixed-mask Protocol 1 product that does not depend on the opened T:
// S [[V]]_i + [[W]]_i. Multiply then computes one (n+m) x (n+p) product per
// tick instead of two, with a bit-identical result (Field.MulClosePrepared).
// It does nothing in the per-tick variant or before the fixed-mask set-up;
// material it did not prepare (or prepared before a later set-up) takes the
// unprepared path. It allocates the r x 1 result (or reuses a recycled
// material's) and only reads the party's set-up, so it must not run
// concurrently with FixedSetupFinish.
func (p *Party) Prepare(mat *TickMaterial) error {
	if p.prm.Variant != FixedMask || p.fixedS.Data == nil {
		return nil
	}
	if err := p.checkMaterial(*mat); err != nil {
		return err
	}
	r, _ := p.prm.PhiShape()
	pre := reshaped(mat.pre, r, 1) // a recycled material's, else new
	p.f.MulPrepare(pre, p.fixedS, mat.Triple)
	mat.pre, mat.preGen, mat.prepared = pre, p.fixedGen, true
	return nil
}

// UsedPrepared reports whether the latest Multiply used material prepared by
// Prepare under the current set-up.
func (p *Party) UsedPrepared() bool { return p.usedPrepared }

// Ready reports whether the party can run a tick.
func (p *Party) Ready() bool { return p.prm.Variant == PerTick || p.fixedS.Data != nil }

// Begin is Protocol 3 step 2 (first half) for tick t: ξ = [x̄_t; ȳ_t] and the
// Protocol 1 opening message. y is the party's share of ȳ_t (p x 1). The
// returned message aliases internal buffers valid until the next Begin.
func (p *Party) Begin(y Matrix, mat TickMaterial) (MulMsg, error) {
	if !p.Ready() {
		return MulMsg{}, fmt.Errorf("%w: fixed-mask set-up not done", ErrStage)
	}
	if y.Rows != p.prm.P || y.Cols != 1 || len(y.Data) != p.prm.P {
		return MulMsg{}, fmt.Errorf("%w: measurement share is %dx%d, want %dx1", ErrDimension, y.Rows, y.Cols, p.prm.P)
	}
	if err := p.checkMaterial(mat); err != nil {
		return MulMsg{}, err
	}
	p.mat = mat
	copy(p.xi.Data, p.x.Data)
	copy(p.xi.Data[p.prm.N:], y.Data)
	p.f.MulOpen(p.tOut, p.xi, mat.Triple.V)
	msg := MulMsg{T: p.tOut}
	if p.prm.Variant == PerTick {
		p.f.MulOpen(p.sOut, p.phi, mat.Triple.U)
		msg.S = p.sOut
	}
	p.st = stageBegun
	return msg, nil
}

func (p *Party) checkMaterial(m TickMaterial) error {
	r, c := p.prm.PhiShape()
	want := func(name string, x Matrix, rows, cols int) error {
		if x.Rows != rows || x.Cols != cols || len(x.Data) != rows*cols {
			return fmt.Errorf("%w: %s is %dx%d, want %dx%d", ErrMaterial, name, x.Rows, x.Cols, rows, cols)
		}
		return nil
	}
	if p.prm.Variant == PerTick {
		if err := want("U", m.Triple.U, r, c); err != nil {
			return err
		}
	}
	for _, e := range []error{
		want("V", m.Triple.V, c, 1), want("W", m.Triple.W, r, 1),
		want("mask M", m.Mask.M, p.prm.N, 1), want("mask L", m.Mask.L, p.prm.N, 1),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// Multiply is Protocol 3 steps 2-4 (first half): it completes Protocol 1 with
// the other party's message and returns the party's share of ū_t (m x 1, to
// the actuator, scale 2^(2l)), and for P0 the Protocol 2 message for P1. The
// returned matrices alias internal buffers valid until the next Begin. It is
// Output followed by TruncStart.
func (p *Party) Multiply(peer MulMsg) (u Matrix, tr *TruncMsg, err error) {
	u, err = p.Output(peer)
	if err != nil {
		return Matrix{}, nil, err
	}
	tr, err = p.TruncStart()
	return u, tr, err
}

// Output is the first half of Multiply: it checks and reconstructs the other
// party's Protocol 1 message and computes only the output rows of the
// product, the party's share of ū_t (m x 1, aliasing an internal buffer
// valid until the next Begin), bit-identical to Multiply's. TruncStart must
// follow before Finish. A malformed message leaves the party begun.
func (p *Party) Output(peer MulMsg) (u Matrix, err error) {
	if p.st != stageBegun {
		return Matrix{}, fmt.Errorf("%w: Multiply before Begin", ErrStage)
	}
	r, c := p.prm.PhiShape()
	if peer.T.Rows != c || peer.T.Cols != 1 || len(peer.T.Data) != c {
		return Matrix{}, fmt.Errorf("%w: T is %dx%d, want %dx1", ErrPeer, peer.T.Rows, peer.T.Cols, c)
	}
	if p.prm.Variant == PerTick {
		if peer.S.Rows != r || peer.S.Cols != c || len(peer.S.Data) != r*c {
			return Matrix{}, fmt.Errorf("%w: S is %dx%d, want %dx%d", ErrPeer, peer.S.Rows, peer.S.Cols, r, c)
		}
	}
	f := p.f
	f.Reconst(p.t, p.tOut, peer.T)
	if p.prm.Variant == PerTick {
		f.Reconst(p.s, p.sOut, peer.S)
	}
	p.usedPrepared = p.prm.Variant == FixedMask && p.mat.prepared && p.mat.preGen == p.fixedGen
	p.closeRows(p.prm.N, r)
	p.st = stageOutput
	return p.z.RowRange(p.prm.N, r), nil
}

// TruncStart is the second half of Multiply: the state rows of the product
// and Protocol 2 step 1 on them. It returns P0's Protocol 2 message for P1
// (aliasing an internal buffer valid until the next Begin), nil for P1.
func (p *Party) TruncStart() (*TruncMsg, error) {
	if p.st != stageOutput {
		return nil, fmt.Errorf("%w: TruncStart before Output", ErrStage)
	}
	p.closeRows(0, p.prm.N)
	p.f.TruncOpen(p.yOpen, p.id, p.z.RowRange(0, p.prm.N), p.mat.Mask, p.prm.L)
	p.st = stageMultiplied
	if p.id != 0 {
		return nil, nil
	}
	p.trMsg = TruncMsg{Y: p.yOpen}
	return &p.trMsg, nil
}

// closeRows is Protocol 1 step 2 for rows [from, to) of the product, into
// the same rows of p.z (each row is its own dot products, so the rows
// computed apart equal the rows computed at once).
func (p *Party) closeRows(from, to int) {
	if from == to {
		return
	}
	rows := func(m Matrix) Matrix { return m.RowRange(from, to) }
	z := rows(p.z)
	if p.usedPrepared {
		p.f.MulClosePrepared(z, rows(p.fixedUS), p.t, rows(p.mat.pre))
		return
	}
	s, uShare := p.fixedS, p.fixedU
	if p.prm.Variant == PerTick {
		s, uShare = p.s, p.mat.Triple.U
	}
	tr := TripleShare{U: rows(uShare), V: p.mat.Triple.V, W: rows(p.mat.Triple.W)}
	p.f.MulClose(z, p.id, rows(s), p.t, tr, tr.U, p.tmp)
}

// Finish is Protocol 2 steps 2-3: the state share becomes [[x̄_{t+1}]]_i. P1
// passes P0's message; P0 passes nil.
func (p *Party) Finish(peer *TruncMsg) error {
	if p.st != stageMultiplied {
		return fmt.Errorf("%w: Finish before Multiply", ErrStage)
	}
	f := p.f
	x := p.z.RowRange(0, p.prm.N)
	if p.id == 1 {
		if peer == nil || peer.Y.Rows != p.prm.N || peer.Y.Cols != 1 || len(peer.Y.Data) != p.prm.N {
			return fmt.Errorf("%w: truncation message missing or not %dx1", ErrPeer, p.prm.N)
		}
		f.Reconst(p.yPeer, p.yOpen, peer.Y)
	} else if peer != nil {
		return fmt.Errorf("%w: P0 receives no truncation message", ErrPeer)
	}
	f.TruncClose(p.x, p.id, x, p.yPeer, p.mat.Mask, p.prm.L, p.inv)
	p.st = stageIdle
	return nil
}
