// Package sensor is the client's measuring side: it performs the offline
// set-up of a loop (sharing Φ̄ and x̄_0, registering the loop with the
// dealers) and then, each tick, reads the plant, encodes y_t, secret-shares it
// and sends one share to each party.
package sensor

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// Options configure one loop's sensor.
type Options struct {
	Loop       string
	Controller mpc.ControllerSpec
	// ControllerFrom names where Controller came from ("DUET_CONTROLLER
	// <path>"), for its sizing and rounding errors; empty: not named.
	ControllerFrom string
	Variant        mpc.Variant
	Compress       bool          // dealers seed-compress P0's material
	Period         time.Duration // tick period (real-time mode)
	Fast           bool          // ticks back to back (the plant paces them)
	Ticks          uint64        // stop after this many ticks (0: run until ctx ends)
	QueueMax       int64         // offline queue capacity (items)
	// ItemsPerMsg is how many offline items the dealers put in one stream
	// message (0: DefaultItemsPerMsg; 1: one, as earlier releases do).
	ItemsPerMsg int
	FileStore   bool          // JetStream file storage for the queue and set-up
	Replicas    int           // JetStream replicas
	PlantWait   time.Duration // timeout of a plant read
	// StateKey, if set, lets a restarted sensor resume the loop's existing
	// set-up (same epoch, parties keep their state) instead of starting a new
	// one; see resume.go.
	StateKey *[32]byte
	// Generation is the set-up generation (DUET_SETUP_GENERATION): a
	// stored set-up made with another is not resumed, so changing it
	// makes the sensor start a new set-up (resume.go).
	Generation uint64
	Log        *slog.Logger
	Metrics    *metrics.Set
	// TwoHop: send a masked measurement when both parties have sent their
	// mask shares for the tick (twohop.go).
	TwoHop bool
	// OnTick, if set, is called for every tick sent with y and the float64
	// plaintext controller's u on the same y.
	OnTick func(tick uint64, y, uplain []float64)
	// NoticeDelay is how long after a tick's measurements the sensor sends
	// the actuator its notice of the tick (0: DefaultNoticeDelay, or
	// Period/4 if shorter, in real time; at once with Fast; negative: at
	// once). The output shares carry the tick's stamp, so a tick that
	// completes needs no notice, and one sent later keeps its server write
	// and the actuator's read out of the tick's own latency; a tick whose
	// shares never come is still dated by it, and the actuator applies the
	// fail-safe at its deadline, provided the delay is shorter than that.
	NoticeDelay time.Duration
}

// DefaultNoticeDelay is Options.NoticeDelay's default in real time (Period/4
// if shorter): well after a tick's output shares, well before the
// actuator's deadline (30 ms by default).
const DefaultNoticeDelay = 5 * time.Millisecond

// noticeDelay resolves Options.NoticeDelay.
func (o Options) noticeDelay() time.Duration {
	switch {
	case o.NoticeDelay < 0:
		return 0
	case o.NoticeDelay > 0:
		return o.NoticeDelay
	case o.Fast:
		return 0
	}
	return min(DefaultNoticeDelay, o.Period/4)
}

// Sensor runs one loop's client measuring side.
type Sensor struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	sealer *codec.Sealer
	opt    Options
	// logs limits the warnings of a tick lost (warnLost): a plant that is
	// down or out of range loses every tick, 25 a second.
	logs   *bus.LogLimit
	rz     mpc.Resolved
	rng    io.Reader
	fc     *mpc.FloatController
	epoch  uint64
	next   uint64 // next tick number
	ticker *time.Ticker
	notice *time.Timer // waits Options.NoticeDelay before a tick's notice
	kv     jetstream.KeyValue
	// plantUp: the plant has answered once since this sensor started.
	// Until then "no responders" means the loop has not started (the
	// plant's process is still starting), not a miss.
	plantUp bool
	// The two-hop tick (twohop.go): the parties' mask shares, their
	// subscription, and the last tick whose measurement was sent.
	masks    masks
	maskSub  *nats.Subscription
	lastSent uint64
	// savedNext is the next tick number of the last resume record stored
	// (saveRecord: by Setup, a resume or RunN's writes; without StateKey,
	// the last one asked for): a sensor restarted now would resume at it plus
	// resumeMargin, so no tick at or above that is sent (resumeCovers).
	savedNext atomic.Uint64
	// With Fast, the wait for the mask shares (awaitMask): its timer and
	// the waits in a row that ended without them.
	maskTimer       *time.Timer
	maskWaitsFailed int
	// The set-up bucket's and the loop's queue's streams as Setup found or
	// made them (their creation times), recordFailed set by a resume record
	// write that failed, and when setupGone last looked them up.
	bucketCreated, queueCreated time.Time
	recordFailed                atomic.Bool
	setupLooked                 time.Time
	// material is an offline item's material in bytes, checked against the
	// server's max_payload (checkItemSize).
	material int
}

// New resolves the controller (sizing the modulus) and prepares the sensor.
func New(nc *nats.Conn, sealer *codec.Sealer, opt Options) (*Sensor, error) {
	if err := codec.ValidLoopID(opt.Loop); err != nil {
		return nil, err
	}
	if opt.Period <= 0 {
		opt.Period = 40 * time.Millisecond
	}
	if opt.QueueMax <= 0 {
		opt.QueueMax = 2000
	}
	if opt.ItemsPerMsg <= 0 {
		opt.ItemsPerMsg = DefaultItemsPerMsg
	}
	if opt.ItemsPerMsg > codec.MaxItemsPerMsg {
		return nil, fmt.Errorf("sensor: %d items per stream message, want 1..%d", opt.ItemsPerMsg, codec.MaxItemsPerMsg)
	}
	if opt.PlantWait <= 0 {
		opt.PlantWait = time.Second
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Metrics == nil {
		opt.Metrics = metrics.New("sensor")
	}
	metrics.Zero([]string{opt.Loop}, opt.Metrics.Ticks, opt.Metrics.Misses) // from the start: metrics.Zero
	if opt.TwoHop {
		metrics.Zero([]string{opt.Loop, metrics.KindItem}, opt.Metrics.Mismatches)
		for _, p := range []string{metrics.PathTwoHop, metrics.PathThreeHop} {
			metrics.Zero([]string{opt.Loop, p}, opt.Metrics.TickPaths)
		}
	}
	rz, err := opt.Controller.Resolve(opt.Variant)
	if err != nil && opt.ControllerFrom != "" {
		return nil, fmt.Errorf("%s: %w", opt.ControllerFrom, err)
	} else if err != nil {
		return nil, err
	}
	// An item is one stream message at the least: one the server or the
	// services cannot carry would leave the dealers failing every refill and
	// the loop with no item, so the set-up is refused here, naming the limit
	// (against the server's max_payload once it is known: checkItemSize).
	material := mpc.DealerBytesPerTick(rz.Params, opt.Compress)
	if err := itemTooLarge(opt.Loop, material, nc.MaxPayload()); err != nil {
		return nil, err
	}
	itemBytes := material + bus.ItemOverhead
	// Large items go fewer to a stream message (the dealers do the same
	// with the real size), and the queue's capacity is sized with that.
	if k := bus.ItemsPerMsg(opt.ItemsPerMsg, itemBytes, bus.MaxOfflineMsg); k < opt.ItemsPerMsg {
		opt.Log.Info("fewer offline items per stream message for large items", "loop", opt.Loop, "asked", opt.ItemsPerMsg, "items_per_msg", k)
		opt.ItemsPerMsg = k
	}
	for _, wmsg := range rz.Warnings {
		opt.Log.Warn(wmsg, "loop", opt.Loop)
	}
	if rz.QuantErr > 0 {
		opt.Log.Info("the controller's entries are rounded onto the fixed-point grid", "loop", opt.Loop,
			"k", opt.Controller.K, "l", opt.Controller.L, "largest_rounding", rz.QuantErr)
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Sensor{nc: nc, js: js, sealer: sealer, opt: opt, rz: rz, material: material, rng: mpc.NewPRG(key, [16]byte{}),
		fc: opt.Controller.NewFloatController(), logs: bus.NewLogLimit()}, nil
}

// DefaultItemsPerMsg is how many offline items a stream message holds by
// default: each party then takes one JetStream delivery per 8 ticks.
const DefaultItemsPerMsg = 8

// itemsPerMsg is the set-up records' ItemsPerMsg: omitted (0) for one item,
// so that the records stay readable by releases before the field.
func (s *Sensor) itemsPerMsg() int {
	if s.opt.ItemsPerMsg == 1 {
		return 0
	}
	return s.opt.ItemsPerMsg
}

// ensureQueue creates or updates the loop's offline queue, holding QueueMax
// items in messages of ItemsPerMsg.
func (s *Sensor) ensureQueue(ctx context.Context) error {
	k := int64(s.opt.ItemsPerMsg)
	st, err := bus.EnsureOfflineQueue(ctx, s.js, bus.OfflineQueue{Loop: s.opt.Loop, MaxMsgs: (s.opt.QueueMax + k - 1) / k}, s.opt.Replicas, s.opt.FileStore)
	if err == nil {
		s.queueCreated = st.CachedInfo().Created
	}
	return s.storageErr(err)
}

// storageErr names the variables a JetStream resource of the sensor's is
// made with when the server refuses it (a replica count above the
// cluster's servers, a storage type that cannot change in place); other
// errors (a timeout, a cancelled start) are returned as they are.
func (s *Sensor) storageErr(err error) error {
	if api := (*jetstream.APIError)(nil); !errors.As(err, &api) {
		return err
	}
	return fmt.Errorf("%w (made with DUET_FILE_STORE=%v and DUET_REPLICAS=%d: the replicas at most the NATS servers in the cluster, and the set-up records' bucket is shared by the sensors of every loop, so set both alike on all)", err, s.opt.FileStore, s.opt.Replicas)
}

// Resolved returns the loop's parameters and sizing.
func (s *Sensor) Resolved() mpc.Resolved { return s.rz }

// Epoch is the set-up epoch (set by Setup; read it after).
func (s *Sensor) Epoch() uint64 { return s.epoch }

// checkItemSize refuses the loop if its offline item is over the NATS
// server's max_payload. New checks it when the connection is up; one whose
// first connection is still being tried (bus.Connect retries it) knows no
// max_payload yet (0), and the check was skipped: it waits here for the
// connection (or ctx), saying so, and checks then.
func (s *Sensor) checkItemSize(ctx context.Context) error {
	if s.nc.MaxPayload() == 0 {
		s.opt.Log.Warn("waiting for the NATS connection: the set-up starts once it is up and the offline item's size is checked against the server's max_payload", "loop", s.opt.Loop)
		if err := bus.WaitConnected(ctx, s.nc); err != nil {
			return fmt.Errorf("sensor: loop %s: waiting for the NATS connection: %w", s.opt.Loop, err)
		}
	}
	return itemTooLarge(s.opt.Loop, s.material, s.nc.MaxPayload())
}

// itemTooLarge refuses the loop's offline item of this much material if it
// is over max_payload or duet's limit (bus.ItemTooLarge; max_payload 0:
// not known yet, checked against duet's alone).
func itemTooLarge(loop string, material int, maxPayload int64) error {
	if why := bus.ItemTooLarge(material, bus.ItemOverhead, maxPayload); why != "" {
		return fmt.Errorf("sensor: loop %s: %s", loop, why)
	}
	return nil
}

// Setup is the offline phase: create the queue (consumers first), then write
// the sealed set-up records for both parties, the actuator and the dealers.
// It first checks the offline item's size against the server's max_payload
// (checkItemSize), waiting for the connection if it is not up yet.
func (s *Sensor) Setup(ctx context.Context) error {
	prm := s.rz.Params
	f := prm.Field
	if err := s.checkItemSize(ctx); err != nil {
		return err
	}
	s.epoch = uint64(time.Now().UnixNano())
	if err := s.ensureQueue(ctx); err != nil {
		return err
	}
	bus.WarnReplicaChange(ctx, s.js, s.opt.Log, bus.SetupBucket, s.opt.Replicas, "DUET_REPLICAS")
	kv, err := bus.EnsureSetupBucket(ctx, s.js, s.opt.Replicas, s.opt.FileStore)
	if err != nil {
		return s.storageErr(err)
	}
	s.kv = kv
	if created, err := bus.StreamCreated(ctx, s.js, bus.SetupStream); err == nil {
		s.bucketCreated = created
	} else {
		// Not fatal: the check that the bucket was not made again since
		// (setupGone) is then off for this run, which is said here.
		s.opt.Log.Warn("the set-up bucket's creation time could not be read: a bucket made again while this sensor runs will not be noticed", "loop", s.opt.Loop, "err", err)
	}
	if ok, err := s.resume(ctx); err != nil {
		return err
	} else if ok {
		return nil
	}
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return err
	}
	sess := mpc.NewSession(secret)
	phi0, phi1, err := f.Share(s.rng, s.rz.Phi)
	if err != nil {
		return err
	}
	x0, x1, err := f.Share(s.rng, s.rz.X0)
	if err != nil {
		return err
	}
	pw := codec.PutParams(prm)
	seed := sess.P0Seed()
	recs := map[codec.Role]any{
		codec.RoleParty0: codec.SetupPayload{Epoch: s.epoch, Params: pw, Phi: codec.PutMatrix(f, phi0), X0: codec.PutMatrix(f, x0),
			P0Seed: seed[:], Stream: bus.OfflineStream(s.opt.Loop), ItemsPerMsg: s.itemsPerMsg(), P0Sealed: !s.opt.Compress},
		codec.RoleParty1: codec.SetupPayload{Epoch: s.epoch, Params: pw, Phi: codec.PutMatrix(f, phi1), X0: codec.PutMatrix(f, x1),
			Stream: bus.OfflineStream(s.opt.Loop), ItemsPerMsg: s.itemsPerMsg()},
		codec.RoleActuator: codec.SetupPayload{Epoch: s.epoch, Params: pw},
		codec.RoleDealer: codec.DealerSetupPayload{Epoch: s.epoch, Params: pw, Secret: secret[:], Compress: s.opt.Compress,
			Stream: bus.OfflineStream(s.opt.Loop), Subject: bus.OfflineSubject(s.opt.Loop), ItemsPerMsg: s.itemsPerMsg()},
	}
	if prm.Variant == mpc.FixedMask {
		_, u1, err := sess.FixedUShares(prm)
		if err != nil {
			return err
		}
		r := recs[codec.RoleParty1].(codec.SetupPayload)
		r.FixedU = codec.PutMatrix(f, u1)
		recs[codec.RoleParty1] = r
	}
	for _, role := range setupRoles {
		kind := codec.KindSetup
		if role == codec.RoleDealer {
			kind = codec.KindDealerSetup
		}
		body, err := codec.Marshal(recs[role])
		if err != nil {
			return err
		}
		env, err := s.sealer.Seal(codec.Header{Kind: kind, Loop: s.opt.Loop, Tick: s.epoch, From: codec.RoleSensor, To: role}, body)
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, bus.SetupKey(s.opt.Loop, role), env); err != nil {
			return fmt.Errorf("writing set-up for %s: %w", role, err)
		}
	}
	if err := s.saveRecord(ctx, 1); err != nil {
		return err
	}
	s.opt.Log.Info("loop set up", "loop", s.opt.Loop, "epoch", s.epoch, "modulus", f.Name(),
		"bits_required", s.rz.Sizing.RequiredBits, "mask", prm.Variant.String(), "compress", s.opt.Compress)
	return nil
}

// Run sends ticks until ctx ends or opt.Ticks have been sent.
func (s *Sensor) Run(ctx context.Context) error { return s.RunN(ctx, s.opt.Ticks) }

// fastRetry is how long a Fast sensor waits after a failed plant read.
const fastRetry = 2 * time.Millisecond

// RunN sends n more ticks (0: until ctx ends), continuing the tick numbering.
func (s *Sensor) RunN(ctx context.Context, n uint64) error {
	prm := s.rz.Params
	f := prm.Field
	yEnc, y0, y1 := mpc.NewMatrix(prm.P, 1), mpc.NewMatrix(prm.P, 1), mpc.NewMatrix(prm.P, 1)
	ty := mpc.NewMatrix(prm.P, 1)
	if s.opt.TwoHop {
		if err := s.subscribeMasks(); err != nil {
			return err
		}
	}
	if !s.opt.Fast && s.ticker == nil {
		s.ticker = time.NewTicker(s.opt.Period)
	}
	if s.next == 0 {
		s.next = 1
	}
	// The resume record is written by one goroutine, in order, so that a
	// slow write cannot land after a newer one; it ends with RunN.
	resume := make(chan uint64, 1)
	// savedNext is what Setup, resume or an earlier RunN stored (saveRecord).
	// Before, each RunN set it to s.next, which after an earlier RunN is past
	// the record stored (far past it after failed writes), so a second RunN
	// could send ticks a sensor resumed from that record sends again.
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		s.saveRecords(ctx, resume)
	}()
	defer func() { close(resume); <-saved }()
	waitLogged := false
	for sent := uint64(0); n == 0 || sent < n; sent++ {
		t := s.next
		s.next++
		if s.ticker != nil {
			select {
			case <-ctx.Done():
				return nil
			case <-s.ticker.C:
			}
		} else if ctx.Err() != nil {
			return nil
		}
		if err := s.setupGone(ctx); err != nil {
			return err
		}
		if !s.resumeCovers(t) {
			if s.ticker == nil {
				// Fast (simulated time): no time passes while the record
				// lags, so the tick waits for it, asking for the write
				// again, instead of spending tick numbers back to back.
				latest(resume, t)
				if !fastPause(ctx) {
					return nil
				}
				s.next, sent = t, sent-1
				continue
			}
			s.unsent(resume, t)
			continue
		}
		y, err := s.readPlant(ctx, t)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, nats.ErrNoResponders) && (s.ticker == nil || !s.plantUp) {
				// The request reached no plant, so the same tick is asked
				// again instead of being counted lost: back to back (the
				// plant paces the ticks; it has not yet resubscribed after
				// a reconnect) after a pause, instead of burning hundreds of
				// tick numbers in a millisecond; in real time before the
				// plant first answers (the loop has not started: in a
				// deployment the sensor often starts first) at the next
				// period. Once it has answered, a plant that stops
				// answering in real time costs ticks, counted as misses.
				if s.ticker != nil {
					if !waitLogged {
						s.opt.Log.Info("waiting for the plant to answer", "loop", s.opt.Loop, "tick", t)
						waitLogged = true
					}
					s.next, sent = t, sent-1 // the loop's sent++ makes it even
					continue
				}
				if !fastPause(ctx) {
					return nil
				}
				s.next, sent = t, sent-1
				continue
			}
			s.missed(resume, "plant read failed", t, err)
			continue
		}
		s.plantUp = true
		if err := f.EcdInto(yEnc.Data, y, prm.K, prm.L); err != nil {
			s.opt.Metrics.Rejects.WithLabelValues("range").Inc()
			s.warnLost("measurement cannot be encoded", t, err)
			s.lost(resume, t)
			continue
		}
		item, vy, masked := uint64(0), mpc.Matrix{}, false
		if s.opt.TwoHop {
			s.awaitMask(ctx, s.lastSent)
			item, vy, masked = s.takeMask(s.lastSent)
			if masked {
				f.MatSub(ty, yEnc, vy)
			}
		}
		if !masked {
			if err := f.ShareInto(s.rng, yEnc, y0, y1); err != nil {
				return err
			}
		}
		up := s.fc.Step(y)
		if s.opt.OnTick != nil {
			s.opt.OnTick(t, y, up)
		}
		now := s.stamp()
		var err0, err1 error
		if masked {
			mp := codec.MeasureMaskedPayload{Item: item, T: codec.PutMatrix(f, ty), SentUnixNano: now}
			err0 = s.publish(codec.KindMeasureMasked, codec.RoleParty0, bus.MeasureSubject(s.opt.Loop, 0), t, mp)
			err1 = s.publish(codec.KindMeasureMasked, codec.RoleParty1, bus.MeasureSubject(s.opt.Loop, 1), t, mp)
		} else {
			err0 = s.publish(codec.KindMeasure, codec.RoleParty0, bus.MeasureSubject(s.opt.Loop, 0), t, codec.MeasurePayload{Y: codec.PutMatrix(f, y0), SentUnixNano: now})
			err1 = s.publish(codec.KindMeasure, codec.RoleParty1, bus.MeasureSubject(s.opt.Loop, 1), t, codec.MeasurePayload{Y: codec.PutMatrix(f, y1), SentUnixNano: now})
		}
		s.lastSent = t // one share may have gone
		if err := errors.Join(err0, err1); err != nil {
			// The connection refused them (closed, or its reconnect buffer
			// full in a long outage): the tick is lost, a miss, not a tick
			// sent; the notice still goes, in case the connection is back.
			s.opt.Metrics.Misses.WithLabelValues(s.opt.Loop).Inc()
			s.warnLost("measurement not published", t, err)
		} else {
			s.opt.Metrics.Ticks.WithLabelValues(s.opt.Loop).Inc()
			if s.opt.TwoHop {
				// Counted once sent: a tick not published is a miss, not
				// a path taken.
				path := metrics.PathThreeHop
				if masked {
					path = metrics.PathTwoHop
				}
				s.opt.Metrics.TickPaths.WithLabelValues(s.opt.Loop, path).Inc()
			}
		}
		s.used(resume, t)
		if !s.waitNotice(ctx) {
			return nil
		}
		s.notify(t, now)
	}
	return nil
}

// errRecordLags: the resume record's writes have failed for resumeMargin
// ticks (the KV store down, or a broker refusing them).
var errRecordLags = errors.New("sensor: the resume record lags; sending no measurement until it is stored")

// resumeCovers reports whether tick t may be sent: whether a sensor
// restarted now, which resumes from the stored record, would start above
// it. A tick number used twice could pair two measurements with one
// offline item's mask (the parties' mask shares for it, stored and replayed
// by the broker to the restarted sensor): while the record's writes fail,
// the ticks go unsent (misses) instead.
func (s *Sensor) resumeCovers(t uint64) bool {
	return s.opt.StateKey == nil || t < s.savedNext.Load()+resumeMargin
}

// used records that tick number t is spent: every resumeEvery ticks the
// resume record moves on, whether the tick was sent or lost (the plant has
// seen its number either way, and a resumed sensor must stay above it).
func (s *Sensor) used(resume chan uint64, t uint64) {
	if t%resumeEvery == 0 {
		latest(resume, s.next)
	}
}

// fastPause waits fastRetry before a tick is tried again in simulated
// time; false if ctx ended first.
func fastPause(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(fastRetry):
		return true
	}
}

// missed is tick t lost for why (err): a miss, logged (LogLimit), and the
// actuator's notice (lost).
func (s *Sensor) missed(resume chan uint64, why string, t uint64, err error) {
	s.opt.Metrics.Misses.WithLabelValues(s.opt.Loop).Inc()
	s.warnLost(why, t, err)
	s.lost(resume, t)
}

// unsent is real-time tick t not sent because the resume record lags
// (resumeCovers): a miss, logged, and nothing sent, not even the actuator's
// notice, and the number not spent: the next period tries t again, asking
// for the record's write again. A sensor restarted from the stored record
// starts below t, so a notice for t (as lost sends) would have had the
// actuator apply the fail-safe for t and then refuse the restarted
// sensor's notices up to t as replays and its outputs as late: the loop
// applied nothing for as long as the writes had failed. With nothing sent,
// the actuator's watchdog applies the fail-safe (DUET_WATCHDOG).
func (s *Sensor) unsent(resume chan uint64, t uint64) {
	s.opt.Metrics.Misses.WithLabelValues(s.opt.Loop).Inc()
	s.warnLost("tick not sent: the resume record has not been stored for resumeMargin ticks", t, errRecordLags)
	s.next = t
	latest(resume, t)
}

// lost is a tick with no measurement sent (the plant did not answer, or its
// measurement is outside the controller's range): the actuator still gets
// its notice, so that the fail-safe applies at its deadline instead of the
// plant keeping the last input; the notice is all the tick sends.
func (s *Sensor) lost(resume chan uint64, t uint64) {
	s.used(resume, t)
	s.notify(t, s.stamp())
}

// stamp is a measurement's or a notice's send time (Unix ns), never before
// the epoch (a clock stepped back, or a resumed sensor's clock behind the
// one that set the loop up): the parties and the actuator refuse one
// stamped earlier as an earlier set-up's (codec.NotBefore).
func (s *Sensor) stamp() int64 { return max(time.Now().UnixNano(), int64(s.epoch)) }

// notify sends the actuator tick t's notice, stamped sent (Unix ns).
func (s *Sensor) notify(t uint64, sent int64) {
	if err := s.publish(codec.KindTick, codec.RoleActuator, bus.TickSubject(s.opt.Loop), t, codec.TickPayload{SentUnixNano: sent}); err != nil {
		s.warnLost("tick notice not published", t, err)
	}
}

// waitNotice waits Options.NoticeDelay after a tick's measurements; false
// if ctx ended meanwhile.
func (s *Sensor) waitNotice(ctx context.Context) bool {
	d := s.opt.noticeDelay()
	if d <= 0 {
		return true
	}
	if s.notice == nil {
		s.notice = time.NewTimer(d)
	} else {
		s.notice.Reset(d)
	}
	select {
	case <-ctx.Done():
		return false
	case <-s.notice.C:
		return true
	}
}

func (s *Sensor) publish(kind codec.Kind, to codec.Role, subj string, tick uint64, payload any) error {
	body, err := codec.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding %v for %v: %w", kind, to, err)
	}
	env, err := s.sealer.Seal(codec.Header{Kind: kind, Loop: s.opt.Loop, Tick: tick, From: codec.RoleSensor, To: to}, body)
	if err != nil {
		return fmt.Errorf("sealing %v for %v: %w", kind, to, err)
	}
	if err := s.nc.Publish(subj, env); err != nil {
		return fmt.Errorf("publishing %v on %s: %w", kind, subj, err)
	}
	return nil
}

// readPlant asks the plant for y_t (request/reply, sealed both ways). The
// read carries the set-up epoch and the answer must echo it
// (codec.PlantReadPayload): a new set-up numbers its ticks from 1 again,
// and an earlier set-up's answer of the same tick, replayed by a broker
// that kept it, would be taken for the plant's.
func (s *Sensor) readPlant(ctx context.Context, t uint64) ([]float64, error) {
	req, err := codec.Marshal(codec.PlantReadPayload{Epoch: s.epoch})
	if err != nil {
		return nil, err
	}
	env, err := s.sealer.Seal(codec.Header{Kind: codec.KindPlantY, Loop: s.opt.Loop, Tick: t, From: codec.RoleSensor, To: codec.RolePlant}, req)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, s.opt.PlantWait)
	defer cancel()
	msg, err := s.nc.RequestWithContext(rctx, bus.PlantYSubject(s.opt.Loop), env)
	if err != nil {
		return nil, err
	}
	h, body, err := s.sealer.Open(msg.Data)
	if err != nil {
		s.opt.Metrics.Reject(err)
		return nil, err
	}
	if h.Kind != codec.KindPlantY || h.From != codec.RolePlant || h.Tick != t || h.Loop != s.opt.Loop {
		err := fmt.Errorf("%w: plant reply is %s of loop %q, tick %d, from %s; want %s of loop %q, tick %d, from %s",
			codec.ErrHeader, h.Kind, h.Loop, h.Tick, h.From, codec.KindPlantY, s.opt.Loop, t, codec.RolePlant)
		s.opt.Metrics.Reject(err)
		return nil, err
	}
	var yp codec.PlantYPayload
	if err := codec.Unmarshal(body, &yp); err != nil {
		s.opt.Metrics.Reject(err)
		return nil, err
	}
	if err := codec.SameEpoch("the plant's answer", yp.Epoch, s.epoch, "a plant of an earlier release; upgrade it with the sensor"); err != nil {
		s.opt.Metrics.Reject(err)
		return nil, err
	}
	if len(yp.Y) != s.rz.Params.P {
		err := fmt.Errorf("%w: plant sent %d outputs, want %d", codec.ErrDimension, len(yp.Y), s.rz.Params.P)
		s.opt.Metrics.Reject(err)
		return nil, err
	}
	return yp.Y, nil
}

// warnLost logs a tick lost for why (each is counted where it is lost): the
// first time, then at most once a minute with how many were not logged
// since, so that a plant down for an hour does not write 90,000 lines.
func (s *Sensor) warnLost(why string, t uint64, err error) {
	if ok, notLogged := s.logs.Allow(why); ok {
		s.opt.Log.Warn(why, "loop", s.opt.Loop, "tick", t, "err", err, "repeats_not_logged", notLogged)
	}
}
