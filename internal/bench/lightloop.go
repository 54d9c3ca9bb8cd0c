package bench

import (
	"context"
	"crypto/rand"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// lightLoop plays one loop's sensor and actuator.
//
// It keeps every tick of the step until the results are read, so its
// records hold no pointers (the ticks in a slice of values, the expected u
// and the first-arrived output shares in flat arrays) and its messages are
// encoded, sealed and opened in buffers it reuses: the loops' harness runs
// in the one process whose collector also marks and sweeps for the parties
// and the server, and a deployment's sensors and actuators do not.
type lightLoop struct {
	nc           *nats.Conn
	sealS, sealA *codec.Sealer
	guard        *codec.ReplayGuard
	loop         string
	prm          mpc.Params
	fc           *mpc.FloatController
	bound        float64
	rng          io.Reader
	yEnc, y0, y1 mpc.Matrix
	twoHop       bool
	ty           mpc.Matrix // the masked measurement (twoHop)
	// The sending side's buffers (run's goroutine only): the payload's
	// matrix entries, its encoding and the envelope.
	wire, body, env []byte

	mu sync.Mutex
	// base is the time the tick records' start offsets count from.
	base time.Time
	// ticks[t-1] is tick t; uplain[(t-1)*M:] the float64 controller's u
	// for it; shares[((t-1)*2+i)*M:] party i's output share, kept until the
	// other one's arrives.
	ticks  []lightTick
	uplain []float64
	shares []mpc.Elem
	sent   int // measured ticks sent
	masked int // of those, sent masked (twoHop)
	// The parties' latest mask shares (twoHop), as the sensor service keeps
	// them (internal/sensor/twohop.go): usable for the tick after the one
	// they were made after, dropped at the next tick either way. maskV[i]
	// holds party i's V_y while mask[i].ok.
	mask     [2]lightMask
	maskV    [2]mpc.Matrix
	lastSent uint64
	// The receiving side's scratch (under mu): the opened payloads (one
	// per subscription, which may run at once), a decoded share or mask and
	// the reconstruction.
	outPlain, maskPlain []byte
	dec, maskDec, z     mpc.Matrix
	got                 []float64
}

// lightMask is one party's KindMaskY (its V_y in lightLoop.maskV).
type lightMask struct {
	ok          bool
	after, item uint64
}

// lightTick is one tick's record: no pointers (see lightLoop).
type lightTick struct {
	start    time.Duration // from lightLoop.base
	lat      time.Duration
	sent     bool // false: a gap (the measurement did not encode)
	measured bool
	have     [2]bool
	done     bool
	wrong    bool
}

func newLightLoop(ids *identities, nc *nats.Conn, loop string, cs mpc.ControllerSpec, prm mpc.Params, bound float64, twoHop bool) (*lightLoop, error) {
	l := &lightLoop{nc: nc, loop: loop, prm: prm, fc: cs.NewFloatController(), bound: bound, guard: codec.NewReplayGuard(),
		yEnc: mpc.NewMatrix(prm.P, 1), y0: mpc.NewMatrix(prm.P, 1), y1: mpc.NewMatrix(prm.P, 1),
		twoHop: twoHop, ty: mpc.NewMatrix(prm.P, 1), base: time.Now(),
		maskV:   [2]mpc.Matrix{mpc.NewMatrix(prm.P, 1), mpc.NewMatrix(prm.P, 1)},
		maskDec: mpc.NewMatrix(prm.P, 1), dec: mpc.NewMatrix(prm.M, 1), z: mpc.NewMatrix(prm.M, 1), got: make([]float64, prm.M)}
	var err error
	if l.sealS, err = ids.sealer(codec.RoleSensor); err != nil {
		return nil, err
	}
	if l.sealA, err = ids.sealer(codec.RoleActuator); err != nil {
		return nil, err
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return nil, err
	}
	l.rng = mpc.NewPRG(key, [16]byte{})
	return l, nil
}

// run sends a tick every period until stopAt (paced by a pacer); ticks due
// from measureFrom on are measured. Each tick is stamped when sent, as the
// sensor stamps its measurements.
func (l *lightLoop) run(ctx context.Context, period time.Duration, measureFrom, stopAt time.Time) {
	f := l.prm.Field
	y := make([]float64, l.prm.P)
	if n := int(time.Until(stopAt)/period) + 2; n > 0 {
		l.mu.Lock()
		l.ticks = slices.Grow(l.ticks, n)
		l.uplain = slices.Grow(l.uplain, n*l.prm.M)
		l.shares = slices.Grow(l.shares, 2*n*l.prm.M)
		l.mu.Unlock()
	}
	pc := newPacer(period)
	defer pc.stop()
	for t := uint64(1); ; t++ {
		due, ok := pc.next(ctx)
		if !ok || due.After(stopAt) {
			return
		}
		// A measurement that moves: a slow sinusoid of a few degrees per output.
		for i := range y {
			y[i] = 3 * math.Sin(float64(t)/25+float64(i))
		}
		if err := f.EcdInto(l.yEnc.Data, y, l.prm.K, l.prm.L); err == nil {
			item, masked := l.takeMask(t)
			if masked {
				f.MatSub(l.ty, l.yEnc, l.ty)
			} else {
				err = f.ShareInto(l.rng, l.yEnc, l.y0, l.y1)
			}
			if err == nil {
				start := l.record(t, l.fc.Step(y), !due.Before(measureFrom), masked)
				if masked {
					l.publishMasked(t, item, start)
				} else {
					l.publish(t, 0, l.y0, start)
					l.publish(t, 1, l.y1, start)
				}
			}
		}
	}
}

// record keeps tick t as sent now, measured or not, with the float64
// controller's u for it, and returns its start. Tick t's record is
// ticks[t-1]: a tick whose measurement did not encode leaves an empty
// record (never sent).
func (l *lightLoop) record(t uint64, uplain []float64, measured, masked bool) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	M := l.prm.M
	for uint64(len(l.ticks)) < t {
		l.ticks = append(l.ticks, lightTick{})
		l.uplain = append(l.uplain, make([]float64, M)...)
		l.shares = append(l.shares, make([]mpc.Elem, 2*M)...)
	}
	copy(l.uplain[(t-1)*uint64(M):t*uint64(M)], uplain)
	lt := &l.ticks[t-1]
	lt.sent, lt.measured = true, measured
	if measured {
		l.sent++
		if masked {
			l.masked++
		}
	}
	start := time.Now()
	lt.start = start.Sub(l.base)
	return start
}

func (l *lightLoop) publish(t uint64, i int, y mpc.Matrix, start time.Time) {
	var p codec.MeasurePayload
	p.Y, l.wire = codec.AppendMatrix(l.prm.Field, l.wire[:0], y)
	p.SentUnixNano = start.UnixNano()
	l.seal(p, codec.KindMeasure, t, i)
}

// seal encodes p, seals it to party i as tick t's message of kind k and
// publishes it, in the loop's reused buffers.
func (l *lightLoop) seal(p any, k codec.Kind, t uint64, i int) {
	var err error
	if l.body, err = codec.MarshalAppend(l.body[:0], p); err != nil {
		return
	}
	if l.env, err = l.sealS.SealAppend(l.env[:0], codec.Header{Kind: k, Loop: l.loop, Tick: t, From: codec.RoleSensor, To: codec.PartyRole(i)}, l.body); err != nil {
		return
	}
	_ = l.nc.Publish(bus.MeasureSubject(l.loop, i), l.env)
}

// publishMasked sends both parties tick t's masked measurement l.ty, padded
// by item's V_y.
func (l *lightLoop) publishMasked(t, item uint64, start time.Time) {
	var p codec.MeasureMaskedPayload
	p.Item, p.SentUnixNano = item, start.UnixNano()
	p.T, l.wire = codec.AppendMatrix(l.prm.Field, l.wire[:0], l.ty)
	for i := range 2 {
		l.seal(p, codec.KindMeasureMasked, t, i)
	}
}

// takeMask puts V_y of both parties' mask shares into l.ty for tick t and
// returns their item, if both made theirs after the tick sent before t and
// for the same item; the shares held are dropped either way.
func (l *lightLoop) takeMask(t uint64) (item uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, b, last := l.mask[0], l.mask[1], l.lastSent
	l.mask, l.lastSent = [2]lightMask{}, t
	if !l.twoHop || !a.ok || !b.ok || a.after != last || b.after != last || a.item != b.item {
		return 0, false
	}
	l.prm.Field.MatAdd(l.ty, l.maskV[0], l.maskV[1])
	return a.item, true
}

// onMask admits one party's mask share (sealed to the sensor, for this
// loop, fresh, p x 1).
func (l *lightLoop) onMask(m *nats.Msg) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, body, err := l.sealS.OpenScratch(&l.maskPlain, m.Data)
	if err != nil || h.Kind != codec.KindMaskY || h.Loop != l.loop {
		return
	}
	id, ok := h.From.PartyID()
	if !ok {
		return
	}
	var mp codec.MaskYPayload
	if l.guard.AdmitView(h, body, &mp, func() error { return mp.V.DecodeInto(l.prm.Field, l.maskDec) }) != nil {
		return
	}
	copy(l.maskV[id].Data, l.maskDec.Data)
	l.mask[id] = lightMask{ok: true, after: h.Tick, item: mp.Item}
}

// maskedSent is the number of measured ticks sent masked.
func (l *lightLoop) maskedSent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.masked
}

func (l *lightLoop) onOutput(m *nats.Msg) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, body, err := l.sealA.OpenScratch(&l.outPlain, m.Data)
	if err != nil || h.Kind != codec.KindOutput || h.Loop != l.loop || l.guard.Accept(h) != nil {
		return
	}
	var op codec.OutputPayload
	if codec.UnmarshalView(body, &op) != nil || op.U.DecodeInto(l.prm.Field, l.dec) != nil {
		return
	}
	id, ok := h.From.PartyID()
	if !ok || h.Tick == 0 || h.Tick > uint64(len(l.ticks)) {
		return
	}
	lt := &l.ticks[h.Tick-1]
	if !lt.sent || lt.done || lt.have[id] {
		return
	}
	M := l.prm.M
	at := (h.Tick - 1) * uint64(M)
	share := func(i int) mpc.Matrix {
		return mpc.Matrix{Rows: M, Cols: 1, Data: l.shares[(at*2)+uint64(i*M) : (at*2)+uint64((i+1)*M)]}
	}
	copy(share(id).Data, l.dec.Data)
	lt.have[id] = true
	if !lt.have[0] || !lt.have[1] {
		return
	}
	lt.lat, lt.done = time.Since(l.base)-lt.start, true
	l.prm.Field.Reconst(l.z, share(0), share(1))
	l.prm.Field.DcdInto(l.got, l.z.Data, 2*l.prm.L)
	for i, u := range l.uplain[at : at+uint64(M)] {
		if math.Abs(l.got[i]-u) > l.bound {
			lt.wrong = true
		}
	}
}

// results returns the latencies of the measured ticks completed within the
// deadline, the number sent, the misses and the wrong results. A tick that
// never completed was abandoned by the parties, whose state then no longer
// follows the float64 controller's: u is checked only up to the first one.
func (l *lightLoop) results(deadline time.Duration) (lat []time.Duration, sent, misses, wrong int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	inSync := true
	for i := range l.ticks {
		lt := &l.ticks[i]
		if !lt.sent {
			continue
		}
		inSync = inSync && lt.done
		if !lt.measured {
			continue
		}
		switch {
		case !lt.done || lt.lat > deadline:
			misses++
		case lt.wrong && inSync:
			wrong++
		default:
			lat = append(lat, lt.lat)
		}
	}
	return lat, l.sent, misses, wrong
}

// pacer paces a loop's ticks: the first is due at once, each later one a
// period after the one before it. A tick is sent when due, or at once when
// the loop comes to it late: a stall of the harness delays ticks but drops
// none, where a time.Ticker drops them, so that a step could hold on fewer
// ticks than its loops' rate.
type pacer struct {
	timer  *time.Timer
	due    time.Time
	period time.Duration
	begun  bool
}

func newPacer(period time.Duration) *pacer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pacer{timer: t, period: period}
}

// next waits until the next tick is due and returns when it was due; false
// when ctx ended first.
func (p *pacer) next(ctx context.Context) (time.Time, bool) {
	if !p.begun {
		p.begun, p.due = true, time.Now()
	} else {
		p.due = p.due.Add(p.period)
	}
	if wait := time.Until(p.due); wait > 0 {
		p.timer.Reset(wait)
		select {
		case <-p.timer.C:
		case <-ctx.Done():
			return p.due, false
		}
	}
	return p.due, ctx.Err() == nil
}

func (p *pacer) stop() { p.timer.Stop() }
