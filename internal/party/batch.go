package party

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/pkg/codec"
)

// Batching of the parties' exchange. While the dispatcher has more inbound
// messages waiting, a message to the other party (Protocol 1's, P0's
// Protocol 2 message) is held and sent with the others the dispatcher
// produces in the same burst, as one batch (codec.AppendBatch) on the other
// party's batch subject: under load, many loops' messages cost the broker
// and both clients one message instead of one each. The batch is sent when
// the dispatcher's queue runs empty, when it holds Options.PeerBatch
// envelopes or 64 KB, before the dispatcher handles another message of a
// loop whose envelope it holds (a loop's exchange never waits behind its
// own next step: only different loops' messages are batched), and before
// anything else this party publishes, so that what it sends keeps its order (P0's Protocol 2 message still leaves
// before its output share: see the subscription in worker.run). With
// nothing waiting, a message goes out on its own at once, as without
// batching. The receiver opens each envelope on its own (Sealer.Open, the
// replay guard), exactly as if it had come alone.

// DefaultPeerBatch is Options.PeerBatch's default.
const DefaultPeerBatch = 16

// maxBatchBytes bounds a batch; a larger envelope goes out on its own.
const maxBatchBytes = 64 << 10

// peerOut is the service's outgoing batch; mu guards it.
type peerOut struct {
	subject string
	holding bool // the dispatcher has more messages waiting
	buf     []byte
	n       int
	loops   []string // the loops of the envelopes held

	// later holds P0's Protocol 2 messages while the deferred work of other
	// loops is due (deferPeer): they leave with the next message this party
	// sends the other party, or at the end of that deferred work's batch
	// (flushAfter), at most Options.PersistDelay later.
	later  []byte
	nLater int
}

// deferPeer holds env, P0's sealed Protocol 2 message for a loop, for the next
// message to the other party or the deferred work's batch (flushAfter).
// Under load a tick's own message to the other party is P0's Protocol 2
// message alone: P1 needs it only to end its tick, and its next tick comes a
// period later. Held, those of many loops travel together, and with the
// pre-openings that follow them, instead of one NATS message per loop tick.
func (s *Service) deferPeer(env []byte) error {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	o := &s.out
	o.later = codec.AppendBatch(o.later, env)
	o.nLater++
	if o.nLater >= s.opt.PeerBatch || len(o.later) >= maxBatchBytes {
		return s.flushLaterLocked()
	}
	return nil
}

// flushLaterLocked sends the Protocol 2 messages held (under outMu).
func (s *Service) flushLaterLocked() error {
	o := &s.out
	if o.nLater == 0 {
		return nil
	}
	err := s.publishBatch(o.later, o.nLater)
	o.later, o.nLater = o.later[:0], 0
	return err
}

// publishBatch sends a batch of n envelopes to the other party, counted.
// Publish copies it into the connection's buffer.
func (s *Service) publishBatch(batch []byte, n int) error {
	s.opt.Metrics.PeerMessages.Inc()
	s.opt.Metrics.PeerEnvelopes.Add(float64(n))
	return s.nc.Publish(s.out.subject, batch)
}

// takeLaterLocked moves the held Protocol 2 messages into the batch, ahead
// of what is added to it next (under outMu): a loop's messages keep their
// order. If both would not fit in one batch, the batch goes out first.
func (s *Service) takeLaterLocked() error {
	o := &s.out
	if o.nLater == 0 {
		return nil
	}
	if o.n+o.nLater >= s.opt.PeerBatch || len(o.buf)+len(o.later) >= maxBatchBytes {
		if err := s.flushLocked(); err != nil {
			return err
		}
	}
	if o.n == 0 {
		o.buf = append(o.buf[:0], o.later...)
	} else {
		o.buf = append(o.buf, o.later[1:]...) // without its BatchMagic
	}
	o.n += o.nLater
	o.later, o.nLater = o.later[:0], 0
	return nil
}

// sendPeer publishes loop's env to the other party on subj (the loop's
// exchange subject), or holds it for the batch. Protocol 2 messages held
// (deferPeer) go ahead of it, in the same message.
func (s *Service) sendPeer(loop, subj string, env []byte) error {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	o := &s.out
	if err := s.takeLaterLocked(); err != nil {
		return err
	}
	if s.opt.PeerBatch > 1 && (o.holding || s.opt.PeerBatchAlways || o.n > 0) && len(env) <= maxBatchBytes/4 {
		o.buf = codec.AppendBatch(o.buf, env)
		o.n++
		o.loops = append(o.loops, loop)
		if !o.holding || o.n >= s.opt.PeerBatch || len(o.buf) >= maxBatchBytes {
			return s.flushLocked()
		}
		return nil
	}
	if err := s.flushLocked(); err != nil {
		return err
	}
	s.opt.Metrics.PeerMessages.Inc()
	s.opt.Metrics.PeerEnvelopes.Inc()
	return s.nc.Publish(subj, env)
}

// publish sends anything else this party sends (output shares), after the
// batch held so far.
func (s *Service) publish(subj string, data []byte) error {
	s.outMu.Lock()
	err := s.flushLocked()
	s.outMu.Unlock()
	if err != nil {
		return err
	}
	return s.nc.Publish(subj, data)
}

// flushLocked sends the batch held so far (under outMu).
func (s *Service) flushLocked() error {
	o := &s.out
	if o.n == 0 {
		return nil
	}
	err := s.publishBatch(o.buf, o.n)
	o.buf, o.n, o.loops = o.buf[:0], 0, o.loops[:0]
	return err
}

// before is called by the dispatcher before it handles a message of loop
// while holding: an envelope of that loop held so far goes out first.
func (s *Service) before(loop string) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	for _, l := range s.out.loops {
		if l == loop {
			if err := s.flushLocked(); err != nil {
				s.opt.Log.Warn("publish", "subject", s.out.subject, "err", err)
			}
			return
		}
	}
}

// flushAll sends everything held for the other party (the dispatcher's
// exit).
func (s *Service) flushAll() {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	for _, err := range []error{s.takeLaterLocked(), s.flushLocked()} {
		if err != nil {
			s.opt.Log.Warn("publish", "subject", s.out.subject, "err", err)
		}
	}
}

// hold tells the batch whether the dispatcher has more messages waiting;
// when it has none, the batch goes out.
func (s *Service) hold(more bool) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	s.out.holding = more
	if !more {
		if err := s.flushLocked(); err != nil {
			s.opt.Log.Warn("publish", "subject", s.out.subject, "err", err)
		}
	}
}

// The deferred work of many loops (after.go) runs in batches, one loop after
// the other on the after queue's goroutine; with the two-hop tick each loop
// sends the other party its pre-opening (KindPreT) and the sensor its mask
// share (KindMaskY). Those are gathered for the batch (afterOut) and sent
// when it ends (flushAfter): the pre-openings as one batch to the other
// party, then the mask shares, each on its loop's subject, so that a
// sensor never sends a masked measurement before the pre-opening it needs
// has left. Before, each pre-opening was a NATS message of its own: under
// load, two of the three messages a loop tick costs between the parties.
// Nothing on a tick's path waits for this: the deferred work already runs
// up to Options.PersistDelay after the tick. With Options.PeerBatch 1 (the
// other party's release has no batches) nothing is gathered.

// afterOut is what one batch of deferred work sends (the after queue's
// goroutine only).
type afterOut struct {
	batch    []byte // codec.AppendBatch of the pre-openings
	n        int    // how many
	lastLen  int    // the length of the last one (the whole of a lone one: batch's tail)
	lastSubj string // and its loop's exchange subject
	spare    []byte // a batch's buffer, reused (flushAfter)
	masks    []byte // the mask shares' envelopes, back to back
	maskEnds []int
	maskSubj []string
	writes   []gatheredWrite // state writes, after the pre-openings
}

// gatheredWrite is a state write gathered for flushAfter (persister.save)
// because a mask share waits for it: its message is the persister's, which
// the loop's next write, in a later batch, reuses only after this one has
// been sent.
type gatheredWrite struct {
	msg   *nats.Msg
	acks  *stateAcks
	token uint64
}

// sendAfter gathers env (from loop's deferred work) for flushAfter: to the
// other party if toPeer, else to subj after the pre-openings.
func (s *Service) sendAfter(loop string, toPeer bool, subj string, env []byte) error {
	a := &s.aout
	if !toPeer {
		a.masks = append(a.masks, env...)
		a.maskEnds = append(a.maskEnds, len(a.masks))
		a.maskSubj = append(a.maskSubj, subj)
		return nil
	}
	if len(env) > maxBatchBytes/4 {
		return s.sendPeer(loop, subj, env)
	}
	a.batch = codec.AppendBatch(a.batch, env)
	a.n, a.lastLen, a.lastSubj = a.n+1, len(env), subj
	if a.n >= s.opt.PeerBatch || len(a.batch) >= maxBatchBytes {
		_ = s.flushAfter() // logs its own errors
	}
	return nil
}

// flushAfter sends what the batch gathered: what the dispatcher holds for
// the other party first (the order of a loop's messages is kept), then the
// pre-openings (alone on the loop's subject if there is one, unless
// PeerBatchAlways, else as one batch), then the state writes, then the mask
// shares (those not waiting for a write: parkMask). Every send is
// tried; errors are logged, and the first is returned.
func (s *Service) flushAfter() error {
	a := &s.aout
	var first error
	note := func(subj string, err error) {
		if err != nil {
			s.opt.Log.Warn("publish", "subject", subj, "err", err)
			if first == nil {
				first = err
			}
		}
	}
	s.outMu.Lock()
	note(s.out.subject, s.flushLocked())
	if s.out.nLater > 0 && a.n > 0 && s.out.nLater+a.n <= s.opt.PeerBatch && len(s.out.later)+len(a.batch) < maxBatchBytes {
		// The Protocol 2 messages held (deferPeer) lead the pre-openings'
		// batch.
		merged := append(append(a.spare[:0], s.out.later...), a.batch[1:]...)
		a.spare, a.batch = a.batch, merged
		a.n += s.out.nLater
		s.out.later, s.out.nLater = s.out.later[:0], 0
	} else {
		note(s.out.subject, s.flushLaterLocked())
	}
	s.outMu.Unlock()
	switch {
	case a.n == 1 && !s.opt.PeerBatchAlways:
		s.opt.Metrics.PeerMessages.Inc()
		s.opt.Metrics.PeerEnvelopes.Inc()
		note(a.lastSubj, s.nc.Publish(a.lastSubj, a.batch[len(a.batch)-a.lastLen:]))
	case a.n > 0: // more than one, or every message in a batch (PeerBatchAlways)
		note(s.out.subject, s.publishBatch(a.batch, a.n))
	}
	for i, wr := range a.writes {
		if err := s.nc.PublishMsg(wr.msg); err != nil {
			note(wr.msg.Subject, err)
			wr.acks.fail(wr.token, err) // the loop retries it before its next tick
		}
		a.writes[i] = gatheredWrite{}
	}
	a.writes = a.writes[:0]
	start := 0
	for i, end := range a.maskEnds {
		note(a.maskSubj[i], s.nc.Publish(a.maskSubj[i], a.masks[start:end]))
		start = end
	}
	clear(a.maskSubj)
	a.batch, a.n, a.lastSubj = a.batch[:0], 0, ""
	a.masks, a.maskEnds, a.maskSubj = a.masks[:0], a.maskEnds[:0], a.maskSubj[:0]
	return first
}

// dispatchBatch routes each envelope of a batch from the other party to its
// loop's worker, as if it had arrived alone on the loop's exchange subject.
// Only the other party's exchange kinds may travel in a batch (Protocol 1's
// and 2's messages, and the two-hop tick's pre-openings, which under load
// leave in the same batches): anything else (a measurement, say, which
// deliver may not handle inline) is refused, as is a malformed batch.
func (s *Service) dispatchBatch(ctx context.Context, m *nats.Msg, holding bool) {
	peer := codec.PartyRole(1 - s.opt.ID)
	err := codec.SplitBatch(m.Data, func(env []byte) {
		h, err := codec.PeekHeader(env)
		if err == nil && (h.From != peer || !exchangeKind(h.Kind)) {
			err = errBatchKind(h)
		}
		if err != nil {
			s.opt.Metrics.Reject(err)
			return
		}
		w := s.workers[h.Loop]
		if w == nil {
			s.opt.Metrics.Reject(errUnknownLoop(h.Loop))
			return
		}
		if holding {
			s.before(h.Loop)
		}
		// The message escapes only if it is queued (not the common case).
		m := nats.Msg{Subject: w.subjExchange, Data: env}
		if w.deliverInline(ctx, &m) {
			w.enqueue(&nats.Msg{Subject: w.subjExchange, Data: env})
		}
	})
	if err != nil {
		s.opt.Metrics.Reject(err)
		s.opt.Log.Debug("batch rejected", "party", s.opt.ID, "err", err)
	}
}

// exchangeKind: the kinds the other party sends on a loop's exchange
// subject, and so may batch.
func exchangeKind(k codec.Kind) bool {
	return k == codec.KindMul || k == codec.KindTrunc || k == codec.KindPreT
}

func errBatchKind(h codec.Header) error {
	return fmt.Errorf("%w: %s from %s in a batch (only the other party's exchange messages travel in one)", codec.ErrKind, h.Kind, h.From)
}

func errUnknownLoop(loop string) error {
	return fmt.Errorf("%w: batched envelope for loop %q, which this party does not serve", codec.ErrHeader, loop)
}
