package bench

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// mulProto is Protocol 1 alone: Z = X Y with X (d x d) shared at set-up and
// Y (d x 1) sent by the client each repetition.
type mulProto struct {
	f        *mpc.Field
	x        mpc.Matrix   // X in the clear (the client's, for checking)
	ys       []mpc.Matrix // Y of each repetition
	y0s, y1s []mpc.Matrix
	parties  [2]*mulParty
}

// prepare is how long after a repetition's answer the fixed-mask parties
// prepare the next repetition's product (see mulParty).
func newMulProto(f *mpc.Field, v mpc.Variant, d, total int, rng io.Reader, prepare time.Duration) (*mulProto, error) {
	p := &mulProto{f: f}
	var err error
	if p.x, err = f.RandomMatrix(rng, d, d); err != nil {
		return nil, err
	}
	x0, x1, err := f.Share(rng, p.x)
	if err != nil {
		return nil, err
	}
	for i, xi := range []mpc.Matrix{x0, x1} {
		p.parties[i] = &mulParty{id: i, f: f, v: v, x: xi, prepareDelay: prepare, pending: map[uint64]codec.MulPayload{},
			y: mpc.NewMatrix(d, 1), tOut: mpc.NewMatrix(d, 1), tPeer: mpc.NewMatrix(d, 1), t: mpc.NewMatrix(d, 1),
			tmp: mpc.NewMatrix(d, 1), z: mpc.NewMatrix(d, 1)}
		if v == mpc.PerTick {
			p.parties[i].sOut, p.parties[i].sPeer, p.parties[i].s = mpc.NewMatrix(d, d), mpc.NewMatrix(d, d), mpc.NewMatrix(d, d)
		}
	}
	var u mpc.Matrix
	if v == mpc.FixedMask {
		// Set-up (untimed): one U; each party opens S = X - U once.
		if u, err = f.RandomMatrix(rng, d, d); err != nil {
			return nil, err
		}
		u0, u1, err := f.Share(rng, u)
		if err != nil {
			return nil, err
		}
		s0, s1 := mpc.NewMatrix(d, d), mpc.NewMatrix(d, d)
		f.MulOpen(s0, x0, u0)
		f.MulOpen(s1, x1, u1)
		s := f.ReconstNew(s0, s1)
		p.parties[0].u, p.parties[0].s = u0, s
		p.parties[1].u, p.parties[1].s = u1, s
		for i, ui := range []mpc.Matrix{u0, u1} {
			p.parties[i].us = f.FixedUS(i, ui, s)
		}
	}
	for t := 0; t < total; t++ {
		var t0, t1 mpc.TripleShare
		if v == mpc.FixedMask {
			t0, t1, err = f.GenFixedTriple(rng, rng, u, 1)
		} else {
			t0, t1, err = f.GenTriple(rng, rng, d, d, 1)
		}
		if err != nil {
			return nil, err
		}
		p.parties[0].mats = append(p.parties[0].mats, t0)
		p.parties[1].mats = append(p.parties[1].mats, t1)
		y, err := f.RandomMatrix(rng, d, 1)
		if err != nil {
			return nil, err
		}
		y0, y1, err := f.Share(rng, y)
		if err != nil {
			return nil, err
		}
		p.ys, p.y0s, p.y1s = append(p.ys, y), append(p.y0s, y0), append(p.y1s, y1)
	}
	return p, nil
}

func (p *mulProto) input(t uint64) (mpc.Matrix, mpc.Matrix) { return p.y0s[t-1], p.y1s[t-1] }
func (p *mulProto) party(i int) partyLogic                  { return p.parties[i] }
func (p *mulProto) outRows() int                            { return p.x.Rows }

func (p *mulProto) check(t uint64, z mpc.Matrix) error {
	want := mpc.NewMatrix(p.x.Rows, 1)
	p.f.MatMul(want, p.x, p.ys[t-1])
	if !z.Equal(want) {
		return fmt.Errorf("%w: Protocol 1, repetition %d", ErrWrongResult, t)
	}
	return nil
}

// mulParty is one party of Protocol 1.
type mulParty struct {
	id   int
	f    *mpc.Field
	v    mpc.Variant
	x    mpc.Matrix // [[X]]_i
	u, s mpc.Matrix // fixed mask: [[U]]_i and the opened S
	us   mpc.Matrix // fixed mask: mpc.Field.FixedUS
	mats []mpc.TripleShare

	// Fixed mask: the next repetition's S [[V]]_i + [[W]]_i, computed
	// prepareDelay after a repetition's answer, in the idle time before the
	// next, as the party service does after a tick (mu: the timer's
	// goroutine against the subscription's).
	prepareDelay time.Duration
	mu           sync.Mutex
	pre          mpc.Matrix
	preFor       uint64
	prepared     int // repetitions closed prepared

	cur     uint64
	begun   bool
	pending map[uint64]codec.MulPayload

	y, tOut, tPeer, t, tmp, z mpc.Matrix
	sOut, sPeer               mpc.Matrix // per-tick only
}

// measure is step 1: open S (per-tick) and T, send them to the other party.
func (p *mulParty) measure(r *responder, t uint64, yw codec.MatrixWire) error {
	if err := yw.DecodeInto(p.f, p.y); err != nil {
		return err
	}
	tr := p.mats[t-1]
	p.f.MulOpen(p.tOut, p.y, tr.V)
	out := codec.MulPayload{Item: t, T: codec.PutMatrix(p.f, p.tOut)}
	if p.v == mpc.PerTick {
		p.f.MulOpen(p.sOut, p.x, tr.U)
		out.S = codec.PutMatrix(p.f, p.sOut)
	}
	if err := r.send(codec.KindMul, t, out); err != nil {
		return err
	}
	p.mu.Lock()
	p.cur, p.begun = t, true
	p.mu.Unlock()
	if pm, ok := p.pending[t]; ok {
		delete(p.pending, t)
		return p.close(r, t, pm)
	}
	return nil
}

func (p *mulParty) peer(r *responder, h codec.Header, body []byte) error {
	if h.Kind != codec.KindMul {
		return fmt.Errorf("%w: %s in Protocol 1", codec.ErrKind, h.Kind)
	}
	var mp codec.MulPayload
	if err := codec.Unmarshal(body, &mp); err != nil {
		return err
	}
	if h.Tick == p.cur && p.begun {
		return p.close(r, h.Tick, mp)
	}
	p.pending[h.Tick] = mp
	return nil
}

// close is step 2: reconstruct S and T, compute the share of Z and send it
// to the client.
func (p *mulParty) close(r *responder, t uint64, mp codec.MulPayload) error {
	p.begun = false
	if mp.Item != t {
		return fmt.Errorf("bench: peer used item %d on repetition %d", mp.Item, t)
	}
	if err := mp.T.DecodeInto(p.f, p.tPeer); err != nil {
		return err
	}
	p.f.Reconst(p.t, p.tOut, p.tPeer)
	tr := p.mats[t-1]
	s, u := p.s, p.u
	if p.v == mpc.PerTick {
		if err := mp.S.DecodeInto(p.f, p.sPeer); err != nil {
			return err
		}
		p.f.Reconst(p.s, p.sOut, p.sPeer)
		s, u = p.s, tr.U
	}
	p.mu.Lock()
	if p.v == mpc.FixedMask && p.preFor == t {
		p.f.MulClosePrepared(p.z, p.us, p.t, p.pre)
		p.prepared++
	} else {
		p.f.MulClose(p.z, p.id, s, p.t, tr, u, p.tmp)
	}
	p.mats[t-1] = mpc.TripleShare{} // used once
	p.mu.Unlock()
	err := r.send(codec.KindOutput, t, codec.OutputPayload{Item: t, U: codec.PutMatrix(p.f, p.z)})
	if p.v == mpc.FixedMask && int(t) < len(p.mats) {
		time.AfterFunc(p.prepareDelay, func() { p.prepareFor(t + 1) })
	}
	return err
}

func (p *mulParty) preparedUses() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.prepared
}

func (p *mulParty) prepareFor(t uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur >= t { // the repetition has begun: it computes unprepared
		return
	}
	if p.pre.Data == nil {
		p.pre = mpc.NewMatrix(p.z.Rows, 1)
	}
	p.f.MulPrepare(p.pre, p.s, p.mats[t-1])
	p.preFor = t
}

// truncProto is Protocol 2 alone on a d x 1 input X in Z<κ>.
type truncProto struct {
	f        *mpc.Field
	l        int
	xs       []mpc.Matrix
	x0s, x1s []mpc.Matrix
	parties  [2]*truncParty
}

func newTruncProto(f *mpc.Field, d, total, l, lambda int, rng io.Reader) (*truncProto, error) {
	kappa := f.BitLen() - 1 - lambda - 1 // κ = floor(log2 q) - λ - 1
	if kappa <= l {
		return nil, fmt.Errorf("bench: κ = %d must exceed l = %d", kappa, l)
	}
	p := &truncProto{f: f, l: l}
	for i := range p.parties {
		p.parties[i] = &truncParty{id: i, f: f, l: l, inv: f.InvPow2(l), pending: map[uint64]codec.TruncPayload{},
			x: mpc.NewMatrix(d, 1), yOwn: mpc.NewMatrix(d, 1), yPeer: mpc.NewMatrix(d, 1), y: mpc.NewMatrix(d, 1), z: mpc.NewMatrix(d, 1)}
	}
	for t := 0; t < total; t++ {
		m0, m1, err := f.GenMask(rng, rng, d, 1, kappa, l, lambda)
		if err != nil {
			return nil, err
		}
		p.parties[0].masks = append(p.parties[0].masks, m0)
		p.parties[1].masks = append(p.parties[1].masks, m1)
		x := mpc.NewMatrix(d, 1)
		if err := f.FillSigned(rng, x.Data, kappa); err != nil {
			return nil, err
		}
		x0, x1, err := f.Share(rng, x)
		if err != nil {
			return nil, err
		}
		p.xs, p.x0s, p.x1s = append(p.xs, x), append(p.x0s, x0), append(p.x1s, x1)
	}
	return p, nil
}

func (p *truncProto) input(t uint64) (mpc.Matrix, mpc.Matrix) { return p.x0s[t-1], p.x1s[t-1] }
func (p *truncProto) party(i int) partyLogic                  { return p.parties[i] }
func (p *truncProto) outRows() int                            { return p.parties[0].x.Rows }

// check accepts round(X / 2^l) + W with W in {-1, 0, 1} (protocol.md §5).
func (p *truncProto) check(t uint64, z mpc.Matrix) error {
	x := p.xs[t-1]
	for k := range x.Data {
		w, ok := p.f.Int64(p.f.Sub(z.Data[k], p.f.RoundShift(x.Data[k], p.l)))
		if !ok || w < -1 || w > 1 {
			return fmt.Errorf("%w: Protocol 2, repetition %d, entry %d is off by %d", ErrWrongResult, t, k, w)
		}
	}
	return nil
}

// truncParty is one party of Protocol 2.
type truncParty struct {
	id    int
	f     *mpc.Field
	l     int
	inv   mpc.Elem
	masks []mpc.MaskShare

	cur      uint64
	measured bool
	pending  map[uint64]codec.TruncPayload

	x, yOwn, yPeer, y, z mpc.Matrix
}

// measure is step 1; P0 also sends its opening (step 2) and finishes at once.
func (p *truncParty) measure(r *responder, t uint64, xw codec.MatrixWire) error {
	if err := xw.DecodeInto(p.f, p.x); err != nil {
		return err
	}
	m := p.masks[t-1]
	p.f.TruncOpen(p.yOwn, p.id, p.x, m, p.l)
	if p.id == 0 {
		if err := r.send(codec.KindTrunc, t, codec.TruncPayload{Item: t, Y: codec.PutMatrix(p.f, p.yOwn)}); err != nil {
			return err
		}
		p.f.TruncClose(p.z, 0, p.x, mpc.Matrix{}, m, p.l, p.inv)
		return r.send(codec.KindOutput, t, codec.OutputPayload{Item: t, U: codec.PutMatrix(p.f, p.z)})
	}
	p.cur, p.measured = t, true
	if tp, ok := p.pending[t]; ok {
		delete(p.pending, t)
		return p.close(r, t, tp)
	}
	return nil
}

func (p *truncParty) peer(r *responder, h codec.Header, body []byte) error {
	if p.id != 1 || h.Kind != codec.KindTrunc {
		return fmt.Errorf("%w: %s to party%d in Protocol 2", codec.ErrKind, h.Kind, p.id)
	}
	var tp codec.TruncPayload
	if err := codec.Unmarshal(body, &tp); err != nil {
		return err
	}
	if h.Tick == p.cur && p.measured {
		return p.close(r, h.Tick, tp)
	}
	p.pending[h.Tick] = tp
	return nil
}

// close is P1's step 3: reconstruct Y and finish.
func (p *truncParty) close(r *responder, t uint64, tp codec.TruncPayload) error {
	p.measured = false
	if err := tp.Y.DecodeInto(p.f, p.yPeer); err != nil {
		return err
	}
	p.f.Reconst(p.y, p.yOwn, p.yPeer)
	p.f.TruncClose(p.z, 1, p.x, p.y, p.masks[t-1], p.l, p.inv)
	return r.send(codec.KindOutput, t, codec.OutputPayload{Item: t, U: codec.PutMatrix(p.f, p.z)})
}
