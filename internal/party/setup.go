package party

import (
	"context"
	"fmt"
	"slices"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// setup waits for the sensor's sealed set-up record and builds the party.
func (w *worker) setup(ctx context.Context) error {
	kv, err := bus.WaitSetupBucket(ctx, w.s.js, w.s.opt.Log)
	if err != nil {
		return err
	}
	return bus.WaitSetupRecord(ctx, kv, bus.SetupKey(w.loop, codec.PartyRole(w.id)), w.s.opt.Log, w.applySetup, func(rev uint64, err error) {
		w.s.opt.Metrics.Reject(err)
		w.s.opt.Log.Error("set-up record rejected; waiting for a new one", "party", w.id, "loop", w.loop, "revision", rev, "err", err)
	})
}

func (w *worker) applySetup(data []byte) error {
	sp, prm, err := codec.OpenSetup(w.s.sealer, data, w.loop)
	if err != nil {
		return err
	}
	r, c := prm.PhiShape()
	phi, err := sp.Phi.Decode(prm.Field, r, c)
	if err != nil {
		return fmt.Errorf("Φ share: %w", err)
	}
	x0, err := sp.X0.Decode(prm.Field, prm.N, 1)
	if err != nil {
		return fmt.Errorf("x0 share: %w", err)
	}
	p, err := mpc.NewParty(prm, w.id, phi, x0)
	if err != nil {
		return err
	}
	if w.id == 0 {
		if len(sp.P0Seed) != 32 {
			return fmt.Errorf("%w: P0 seed has %d bytes, want 32", codec.ErrMalformed, len(sp.P0Seed))
		}
		copy(w.p0Seed[:], sp.P0Seed)
		w.expander = mpc.NewExpander(prm, w.p0Seed)
		w.p0Sealed = sp.P0Sealed
	}
	if prm.Variant == mpc.FixedMask {
		var u mpc.Matrix
		if w.id == 0 {
			u, err = mpc.FixedUShare0(prm, w.p0Seed)
		} else {
			u, err = sp.FixedU.Decode(prm.Field, r, c)
		}
		if err != nil {
			return fmt.Errorf("fixed U share: %w", err)
		}
		if w.ownS, err = p.FixedSetupMsg(u); err != nil {
			return err
		}
	}
	w.prm, w.p, w.epoch, w.perMsg = prm, p, sp.Epoch, max(1, sp.ItemsPerMsg)
	w.yBuf = mpc.NewMatrix(prm.P, 1)
	w.s.opt.Log.Info("set-up loaded", "party", w.id, "loop", w.loop, "epoch", sp.Epoch,
		"n", prm.N, "m", prm.M, "p", prm.P, "modulus", prm.Field.Name(), "mask", prm.Variant.String())
	return nil
}

// sendFixedS sends [[S]]_i of the fixed-mask set-up as a tick-0 KindMul
// message; Item 0 asks the peer to answer with its own, Item 1 does not.
func (w *worker) sendFixedS(ask bool) {
	item := uint64(1)
	if ask {
		item = 0
	}
	// Version carries the set-up epoch: the share is the same every time
	// within one, and a share of another epoch (a replay) is refused.
	w.out.mul = codec.MulPayload{Item: item, Version: w.epoch, S: codec.PutMatrix(w.prm.Field, w.ownS), Inc: w.inc, Peer: w.peerInc}
	w.send(codec.KindMul, 0, &w.out.mul)
}

// onFixedS completes the fixed-mask set-up with the other party's share of
// S (its tick-0 KindMul, which the replay guard does not cover: it may come
// again, as an answer or a request). A share of another set-up epoch is
// refused, and once the set-up is complete a different share is too, so a
// replayed message cannot change the opened S under a running loop.
func (w *worker) onFixedS(mp codec.MulPayload) {
	if mp.Version != w.epoch {
		w.reject(fmt.Errorf("%w: fixed-mask S share of set-up epoch %d, want %d (a party of an earlier release sends 0: upgrade both)", codec.ErrReplay, mp.Version, w.epoch))
		return
	}
	r, c := w.prm.PhiShape()
	s, err := mp.S.Decode(w.prm.Field, r, c)
	if err != nil {
		w.reject(err)
		return
	}
	if w.fixedOK {
		if !slices.Equal(s.Data, w.peerS.Data) {
			w.reject(fmt.Errorf("%w: a second, different fixed-mask S share in set-up epoch %d", codec.ErrReplay, w.epoch))
			return
		}
	} else {
		if err := w.p.FixedSetupFinish(w.ownS, s); err != nil {
			w.reject(err)
			return
		}
		w.peerS = s
		w.s.opt.Log.Info("fixed-mask set-up complete", "party", w.id, "loop", w.loop)
	}
	w.fixedOK = true
	w.ready.Store(true)
	if mp.Item == 0 {
		w.sendFixedS(false)
	}
}
