package sensor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/pkg/codec"
)

// A restarted sensor resumes the loop's existing set-up rather than starting
// a new epoch (which would reset the controller state the parties hold). Its
// own record in the set-up bucket, sealed under a key derived from its
// identity, holds the epoch, a digest of the controller and loop options, and
// the next tick number, written every resumeEvery ticks; a resumed sensor
// skips resumeMargin ticks so its ticks stay above anything already sent
// (the parties' replay guards accept only increasing ticks).
const (
	resumeEvery  = 25
	resumeMargin = 4 * resumeEvery
)

type record struct {
	Epoch    uint64   `msgpack:"epoch"`
	Digest   [32]byte `msgpack:"digest"`
	NextTick uint64   `msgpack:"next_tick"`
	// ItemsPerMsg is the set-up's items per stream message (omitted for one,
	// as earlier releases wrote the record).
	ItemsPerMsg int `msgpack:"items_per_msg,omitempty"`
	// Wire is the wire version the set-up's envelopes were sealed with
	// (codec.Version; absent in records of releases that spoke version 1).
	Wire uint8 `msgpack:"wire,omitempty"`
	// Keys is a digest of the public keys the set-up records are sealed
	// to (setupRoles; codec.Sealer.PeerKeys); absent in records of earlier
	// releases, which are resumed as before.
	Keys []byte `msgpack:"keys,omitempty"`
	// Params are the parameters the set-up was made with, as resolved from
	// the controller (the modulus, with "modulus": "auto", by this build's
	// sizing); absent in records of earlier releases, which are resumed as
	// before and stamped with the parameters this build resolves.
	Params *codec.ParamsWire `msgpack:"params,omitempty"`
}

// setupRoles are the roles the sensor seals a set-up record to.
var setupRoles = []codec.Role{codec.RoleParty0, codec.RoleParty1, codec.RoleActuator, codec.RoleDealer}

// resumable reports whether a stored record's set-up can be resumed by a
// sensor whose controller and options digest to digest, and if not, why.
// A set-up sealed with another wire version cannot be: the parties would
// refuse its stored set-up envelopes (codec.ErrVersion) and never start.
// A set-up whose recipients' keys changed cannot be either: a role whose
// key was rotated alone cannot open the records sealed to its old key, and
// would wait for a new set-up for ever. Nor can one whose items per
// message or next tick is out of range (the record is the sensor's own, so
// only a fault puts them there). Nor can one whose parameters differ from
// those this build resolves from the same controller (params): the digest
// covers the controller as written, and a build whose modulus sizing chose
// another modulus would share the measurements in a field the parties do
// not compute in, every u wrong.
func resumable(rec record, digest, keys [32]byte, params *codec.ParamsWire) (bool, string) {
	switch {
	case rec.Wire != codec.Version:
		return false, fmt.Sprintf("the stored set-up was sealed with wire version %d (0: version 1), this build speaks %d", rec.Wire, codec.Version)
	case rec.Digest != digest:
		return false, "the controller, DUET_MASK, DUET_COMPRESS or DUET_SETUP_GENERATION changed"
	case rec.Params != nil && params != nil && *rec.Params != *params:
		return false, fmt.Sprintf("the parameters resolved from the controller, %+v, differ from the stored set-up's, %+v (another build's modulus sizing)", *params, *rec.Params)
	case len(rec.Keys) > 0 && !bytes.Equal(rec.Keys, keys[:]):
		return false, "the public key of a role the set-up is sealed to (party0, party1, the actuator or the dealers) changed"
	case rec.ItemsPerMsg < 0 || rec.ItemsPerMsg > codec.MaxItemsPerMsg:
		return false, fmt.Sprintf("the stored set-up's items per stream message, %d, is outside 0..%d", rec.ItemsPerMsg, codec.MaxItemsPerMsg)
	case rec.NextTick > codec.MaxTick-resumeMargin:
		return false, fmt.Sprintf("the stored set-up's next tick, %d, is beyond the ticks the receivers admit (2^62 less the resume margin)", rec.NextTick)
	}
	return true, ""
}

// StateKey derives the sensor's record key from its identity.
func StateKey(id *codec.Identity) ([32]byte, error) { return id.RecordKey("duet/v1/sensor-state") }

// digest covers what a resumed set-up must have been made with: the
// controller, the variant, compression and the set-up generation
// (Options.Generation). Generation 0 is left out, so that the digest of a
// set-up made before the generation existed is unchanged and it resumes.
func (s *Sensor) digest() [32]byte {
	b, _ := json.Marshal(struct {
		C any
		V string
		Z bool
		G uint64 `json:",omitempty"`
	}{s.opt.Controller, s.opt.Variant.String(), s.opt.Compress, s.opt.Generation})
	return sha256.Sum256(b)
}

// params are the set-up's parameters as the resume record holds them (nil
// for a Sensor that New did not make, as some tests build one).
func (s *Sensor) params() *codec.ParamsWire {
	if s.rz.Params.Field == nil {
		return nil
	}
	p := codec.PutParams(s.rz.Params)
	return &p
}

func (s *Sensor) recordKey() string { return bus.SetupKey(s.opt.Loop, codec.RoleSensor) }

// resume adopts the stored set-up if it is for the same controller.
func (s *Sensor) resume(ctx context.Context) (bool, error) {
	if s.opt.StateKey == nil {
		return false, nil
	}
	e, err := s.kv.Get(ctx, s.recordKey())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sensor: reading its record: %w", err)
	}
	var rec record
	if err := codec.OpenRecord(s.opt.StateKey, s.recordKey(), e.Value(), &rec); err != nil {
		// Counted as the parties count a state record that does not open
		// (other_key, auth or malformed), since the new set-up it forces
		// resets the loop's state: before, only the log said so.
		s.opt.Metrics.Reject(err)
		switch {
		case errors.Is(err, codec.ErrOtherKey):
			s.opt.Log.Warn("sensor record was sealed under another key of the sensor's, as after a key rotation; starting a new set-up", "loop", s.opt.Loop, "err", err)
		case errors.Is(err, codec.ErrAuth):
			s.opt.Log.Warn("sensor record does not open with this sensor's key; starting a new set-up", "loop", s.opt.Loop, "err", err)
		default:
			s.opt.Log.Warn("sensor record unreadable; starting a new set-up", "loop", s.opt.Loop, "err", err)
		}
		return false, nil
	}
	if ok, why := resumable(rec, s.digest(), s.sealer.PeerKeys(setupRoles...), s.params()); !ok {
		// The parties and the actuator read their set-up at start only: a
		// new one reaches them when they restart.
		s.opt.Log.Warn(why+"; starting a new set-up (a new epoch, ticks from 1): restart the parties and the actuator of this loop too (the plant takes the new set-up's ticks at its first read)", "loop", s.opt.Loop)
		return false, nil
	}
	s.epoch, s.next = rec.Epoch, rec.NextTick+resumeMargin
	// The parties and dealers hold the set-up's items per message: keep it,
	// and size the queue with it again.
	if k := max(1, rec.ItemsPerMsg); k != s.opt.ItemsPerMsg {
		s.opt.Log.Warn("DUET_ITEMS_PER_MSG is not applied to the set-up resumed: it keeps the offline items per stream message it was made with, which its parties and dealers hold; the value configured takes effect with the next new set-up (a changed controller, DUET_MASK, DUET_COMPRESS or DUET_SETUP_GENERATION, or new keys)",
			"loop", s.opt.Loop, "items_per_msg", k, "configured", s.opt.ItemsPerMsg)
		s.opt.ItemsPerMsg = k
		if err := s.ensureQueue(ctx); err != nil {
			return false, err
		}
	}
	s.opt.Log.Info("resumed the existing set-up", "loop", s.opt.Loop, "epoch", s.epoch, "next_tick", s.next)
	return true, s.saveRecord(ctx, s.next)
}

// saveRecord stores the resume record with next as its next tick, and once
// it is stored (or if there is no record to store) keeps next in savedNext,
// which resumeCovers reads.
func (s *Sensor) saveRecord(ctx context.Context, next uint64) error {
	if next == 0 {
		next = 1
	}
	if s.opt.StateKey != nil && s.kv != nil {
		keys := s.sealer.PeerKeys(setupRoles...)
		data, err := codec.SealRecord(s.opt.StateKey, s.recordKey(), record{Epoch: s.epoch, Digest: s.digest(), NextTick: next, ItemsPerMsg: s.itemsPerMsg(), Wire: codec.Version, Keys: keys[:], Params: s.params()})
		if err != nil {
			return err
		}
		if _, err := s.kv.Put(ctx, s.recordKey(), data); err != nil {
			return err
		}
	}
	s.savedNext.Store(next)
	return nil
}

// errSetupGone: the set-up bucket or the loop's queue is not the one the
// set-up was made in.
var errSetupGone = errors.New("the loop's set-up is gone from the server")

// setupGone is called every tick. Once a resume record write has failed
// (recordFailed), it looks the set-up bucket's stream and the loop's queue
// up, at most once a second, until it finds both as Setup left them, and
// returns an error, which ends Run, if the server answers that either is
// gone or was created again since: a NATS server restarted on memory
// storage (DUET_FILE_STORE=false) or the bucket deleted takes the loop's
// set-up records and queue with it (another loop's sensor, restarted first,
// may have made the bucket again meanwhile), and the sensor sets a loop up
// only at start. Before, it ran on, ready, sending nothing once its record
// lagged, or sending measurements to parties that could not start without
// their set-up: the loop stood until someone restarted the sensor. A server
// that does not answer (still restarting) is looked at again later.
func (s *Sensor) setupGone(ctx context.Context) error {
	if s.js == nil || !s.recordFailed.Load() || time.Since(s.setupLooked) < time.Second {
		return nil
	}
	// The look runs on the tick loop: it waits at most four periods (and
	// 100 ms at the least) for the server, and the next comes a second
	// after it ends, so that a server slow to answer costs the loop a few
	// periods a second, not all but one (before, each look waited up to a
	// second and the next was due at once).
	wait := time.Second
	if p := s.opt.Period; p > 0 {
		wait = min(wait, max(4*p, 100*time.Millisecond))
	}
	defer func() { s.setupLooked = time.Now() }()
	lctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for _, c := range []struct {
		stream, what string
		created      time.Time
	}{
		{bus.SetupStream, "the set-up bucket " + bus.SetupBucket, s.bucketCreated},
		{bus.OfflineStream(s.opt.Loop), "the loop's offline queue " + bus.OfflineStream(s.opt.Loop), s.queueCreated},
	} {
		why := ""
		created, err := bus.StreamCreated(lctx, s.js, c.stream)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			why = "is gone"
		case err != nil:
			return nil // no answer: looked at again later
		case !c.created.IsZero() && !created.Equal(c.created):
			why = "was created again"
		}
		if why != "" {
			return fmt.Errorf("sensor: loop %s: %w: %s %s since the set-up was made (a NATS server restarted on memory storage, DUET_FILE_STORE=false, or it was deleted): exiting, so that the sensor is restarted and sets the loop up again; restart the loop's actuator too once it has", s.opt.Loop, errSetupGone, c.what, why)
		}
	}
	s.recordFailed.Store(false)
	return nil
}

// saveRecords writes the resume record for each next tick number it
// receives, until the channel closes, and keeps the last one stored in
// savedNext. A write that fails is logged; the record then lags, and once
// it lags by resumeMargin ticks the sensor sends no more measurements until
// a write succeeds (resumeCovers), so that a sensor resumed from it cannot
// reuse a tick number.
func (s *Sensor) saveRecords(ctx context.Context, next <-chan uint64) {
	failed := false
	for n := range next {
		// A write stuck on a lost connection is given up after a second
		// (not JetStream's default of five), so that the next one is tried
		// before the ticks stop.
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		err := s.saveRecord(wctx, n)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.recordFailed.Store(true) // setupGone looks
		}
		switch {
		case err != nil && ctx.Err() == nil && !failed:
			s.opt.Log.Warn("writing the resume record", "loop", s.opt.Loop, "next_tick", n, "err", err)
			failed = true
		case err == nil && failed:
			s.opt.Log.Info("resume record written again", "loop", s.opt.Loop, "next_tick", n)
			failed = false
		}
	}
}

// latest puts v in ch (capacity 1), replacing a value still waiting there.
func latest(ch chan uint64, v uint64) {
	for {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}
