package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/actuator"
	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/plantsvc"
	"github.com/duet-mpc/duet/internal/sensor"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

// The full controller tick through the real services: sensor (encode, share,
// seal, publish), P0 and P1 (item from the JetStream queue, Protocol 1 with
// one exchange, output shares, Protocol 2 and the state persistence off the
// actuation path), actuator (open, reconstruct, decode, apply). The latency
// is the actuator's: from the sensor's publish to the reconstruction. The
// queue is prefilled so the dealers are idle, and ticks are paced (each
// waits for the previous one to be applied, then a gap) so they never
// overlap. The floor runs interleaved in blocks on the same server with the
// message sizes sniffed from the case's own warm-up ticks.

// TickCase is one row of tick.csv.
type TickCase struct {
	Name       string
	Controller mpc.ControllerSpec
	Plant      plant.Spec
	Variant    mpc.Variant
	NoPersist  bool // parties without crash-recovery persistence
	// TwoHop runs the sensor and the parties with the two-hop tick
	// (DUET_TWO_HOP), beside the two-hop floor (FloorSizes.TwoHop).
	TwoHop bool
}

// TickOptions configure RunTick.
type TickOptions struct {
	URL    string
	Ticks  int // measured ticks (and as many floor ticks)
	Warmup int // unmeasured ticks first (default 50)
	// Gap is the pause after each tick is applied (default 5 ms: longer
	// than the parties' after-tick work, DUET_PERSIST_DELAY = 2 ms, which a
	// 40 ms period always leaves room for).
	Gap      time.Duration
	Block    int // system and floor alternate in blocks of this many ticks (default 100)
	Compress bool
	Log      *slog.Logger
	// PeerBatch is the parties' party.Options.PeerBatch (0: the default).
	PeerBatch int
	// Prefetch is the parties' party.Options.Prefetch (0: the default).
	Prefetch int
	// WriteCoalesce is the parties' DUET_WRITE_COALESCE (0: the default;
	// negative: off).
	WriteCoalesce time.Duration
	// StateFileStore puts the parties' persisted state in JetStream file
	// storage (DUET_STATE_FILE_STORE, the services' default); false: memory.
	StateFileStore bool
	// PartyBin, if set, runs the two parties as this binary (a build of
	// cmd/party), each in its own process, as ScaleOptions.PartyBin does;
	// "": inside the bench.
	PartyBin string
}

// TickRow is a case's result.
type TickRow struct {
	Case       string
	Lat, Floor Stats
	// ColdFloor is the floor without the sensor's plant read before each
	// tick (FloorSizes.PlantRequest), every tick sent from idle: the floor
	// of the sessions before the twenty-seventh, interleaved with the
	// others in the same run for comparison.
	ColdFloor  Stats
	Misses     int // deadline misses and ticks never applied
	Sizes      FloorSizes
	MaxDiff    float64 // max |u - uplain| over the measured ticks
	Bound      float64 // the bound max |u - uplain| must respect (sim.OutputBound)
	N, M, P    int
	Modulus    string
	Variant    mpc.Variant
	QueueAfter int // items left in the queue after the run (dealers idle: > 0)
	Persist    bool
	// StateFileStore: the state was persisted to JetStream file storage
	// (false: memory, or not persisted).
	StateFileStore bool
	// Abandoned counts ticks the parties did not complete (their state
	// version did not advance within a second); u is compared with the
	// float64 controller only before the first one.
	Abandoned int
	// Steal is the CPU the hypervisor took from the machine while the
	// case's ticks and floor ticks ran (cores; NaN where unreadable).
	Steal float64
	// TwoHopTicks: of the measured ticks, those the sensor sent masked
	// (duet_tick_paths_total{path="two_hop"}; 0 without TwoHop), and
	// FallbackTicks those of them that a party still ran with the exchange
	// after the measurement (the larger count of the two parties).
	TwoHopTicks, FallbackTicks int
	// PartyProcs: the parties ran as processes of their own
	// (TickOptions.PartyBin).
	PartyProcs bool
}

// RunTick measures one case.
func RunTick(ctx context.Context, opt TickOptions, c TickCase) (TickRow, error) {
	if opt.Warmup <= 0 {
		opt.Warmup = 50
	}
	if opt.Gap <= 0 {
		opt.Gap = 5 * time.Millisecond
	}
	if opt.Block <= 0 {
		opt.Block = 100
	}
	row := TickRow{Case: c.Name, Variant: c.Variant, Persist: !c.NoPersist, PartyProcs: opt.PartyBin != ""}
	r, err := newRig(ctx, opt.URL, opt.Log)
	if err != nil {
		return row, err
	}
	defer r.close()
	r.peerBatch, r.writeCoalesce, r.stateFile, r.twoHop = opt.PeerBatch, opt.WriteCoalesce, opt.StateFileStore, c.TwoHop
	r.partyBin, r.prefetch = opt.PartyBin, opt.Prefetch
	row.StateFileStore = opt.StateFileStore && row.Persist
	loop := "b" + uniqueTag() // 7 characters, like "pendulum": ids travel in every header
	total := opt.Warmup + opt.Ticks
	lowWater := total + 2*r.prefetchOrDefault() + 64 // a party holds up to about three times its prefetch
	rec := newTickRecorder()

	nc, err := r.connect("sensor")
	if err != nil {
		return row, err
	}
	sm := metrics.New("sensor")
	// The sensor ticks as fast as the recorder's plant lets it, and sends
	// each tick's notice to the actuator 2 ms after its measurements, as a
	// sensor in real time does after DefaultNoticeDelay: after the tick,
	// within the recorder's gap, before the next tick's plant read.
	sn, err := r.setupLoop(nc, loopSpec{Loop: loop, Controller: c.Controller, Variant: c.Variant, Compress: opt.Compress,
		QueueMax: int64(2*lowWater + 256), Fast: true, OnTick: rec.onTick, TwoHop: c.TwoHop, Metrics: sm, NoticeDelay: 2 * time.Millisecond})
	if err != nil {
		return row, err
	}
	prm := sn.Resolved().Params
	row.Bound = sim.OutputBound(c.Controller, sn.Resolved())
	row.N, row.M, row.P, row.Modulus = prm.N, prm.M, prm.P, prm.Field.Name()
	if err := r.startPlantActuator(loop, c.Plant, prm, rec.onApply); err != nil {
		return row, err
	}
	if err := r.startParties([]string{loop}, !c.NoPersist, nil); err != nil {
		return row, err
	}
	if _, err := r.startDealers(1, dealer.Options{LowWater: lowWater}); err != nil {
		return row, err
	}
	// A party process that exits ends the wait at once, with its output.
	if err := waitFor(ctx, 60*time.Second, "parties' set-up", func() bool { return r.procExited() != nil || r.partiesReady() }); err != nil {
		return row, err
	}
	if err := r.procExited(); err != nil {
		return row, err
	}
	if err := r.waitQueues(ctx, []string{loop}, lowWater, 120*time.Second); err != nil {
		return row, err
	}

	// Warm-up, with a sniffer recording the envelope sizes for the floor.
	if r.partyBin != "" {
		// A party process's completed ticks are its duet_ticks_total,
		// counted where an in-process party's state version advances; read
		// from its /metrics, so polled less often (procTicks).
		rec.poll = time.Millisecond
		rec.partiesAt = func(v uint64) bool {
			n, err := r.procTicks(ctx, loop)
			return err == nil && n[0] >= float64(v) && n[1] >= float64(v)
		}
	} else {
		rec.partiesAt = func(v uint64) bool {
			for _, p := range r.parties {
				if st, ok := p.Status(loop); !ok || st.Version < v {
					return false
				}
			}
			return true
		}
	}
	sizes, err := r.sniffSizes(loop, func() error { return rec.run(ctx, sn, 1, opt.Warmup, opt.Gap) })
	if err != nil {
		return row, err
	}
	sizes.TwoHop = c.TwoHop
	// The plant's reply: the request's envelope less its body (the read's
	// set-up epoch) plus the encoded p outputs and the epoch echoed.
	epoch := sn.Epoch()
	read, err := codec.Marshal(codec.PlantReadPayload{Epoch: epoch})
	if err != nil {
		return row, err
	}
	body, err := codec.Marshal(codec.PlantYPayload{Y: make([]float64, prm.P), Epoch: epoch})
	if err != nil {
		return row, err
	}
	sizes.PlantReply = sizes.PlantRequest - len(read) + len(body)
	row.Sizes = sizes
	// Beside parties in processes of their own, the floor's relays run in
	// processes of their own too: the floor of the same shape.
	newFloor := NewFloorRig
	if r.partyBin != "" {
		newFloor = NewFloorRigRelays
	}
	floor, err := newFloor(opt.URL, sizes)
	if err != nil {
		return row, err
	}
	defer floor.Close()
	// The floor as measured before the twenty-seventh session: no plant
	// read, each tick sent from idle (ColdFloor, for comparison).
	coldSizes := sizes
	coldSizes.PlantRequest, coldSizes.PlantReply = 0, 0
	cold, err := newFloor(opt.URL, coldSizes)
	if err != nil {
		return row, err
	}
	defer cold.Close()
	// The floors' first ticks are not measured either, as the case's are
	// not (opt.Warmup): a new rig's first ticks find its connections cold.
	if _, err := floor.Run(ctx, opt.Warmup, opt.Gap); err != nil {
		return row, err
	}
	if _, err := cold.Run(ctx, opt.Warmup, opt.Gap); err != nil {
		return row, err
	}
	var flat, coldLat []time.Duration
	next := uint64(opt.Warmup) + 1
	masked0, fb0, err := r.tickPaths(ctx, sm)
	if err != nil {
		return row, err
	}
	cm := startCPUMeter()
	// A tick abandoned in the warm-up (a first tick's set-up) is not one of
	// the measured ticks', as its miss would not be.
	abandoned0 := rec.abandoned
	for done := 0; done < opt.Ticks; {
		b := min(opt.Block, opt.Ticks-done)
		if err := rec.run(ctx, sn, next, b, opt.Gap); err != nil {
			return row, err
		}
		fl, err := floor.Run(ctx, b, opt.Gap)
		if err != nil {
			return row, err
		}
		flat = append(flat, fl...)
		if fl, err = cold.Run(ctx, b, opt.Gap); err != nil {
			return row, err
		}
		coldLat = append(coldLat, fl...)
		next += uint64(b)
		done += b
	}
	_, row.Steal = cm.cores(0)
	masked1, fb1, err := r.tickPaths(ctx, sm)
	if err != nil {
		return row, err
	}
	row.TwoHopTicks = int(masked1 - masked0)
	row.FallbackTicks = int(max(fb1[0]-fb0[0], fb1[1]-fb0[1]))
	lat, misses, maxDiff := rec.results(uint64(opt.Warmup)+1, uint64(total))
	row.Lat, row.Floor, row.Misses, row.MaxDiff = Summarize(lat), Summarize(flat), misses, maxDiff
	row.ColdFloor = Summarize(coldLat)
	row.Abandoned = rec.abandoned - abandoned0
	if n, err := r.queueItems(ctx, loop); err == nil {
		row.QueueAfter = n
	}
	return row, nil
}

// startPlantActuator starts the plant service and the actuator of a loop.
func (r *rig) startPlantActuator(loop string, ps plant.Spec, prm mpc.Params, onApply func(actuator.Applied)) error {
	pl, err := plant.New(ps)
	if err != nil {
		return err
	}
	if pl.Outputs() != prm.P || pl.Inputs() != prm.M {
		return fmt.Errorf("bench: plant has %d outputs and %d inputs, the controller expects p=%d, m=%d", pl.Outputs(), pl.Inputs(), prm.P, prm.M)
	}
	nc, err := r.connect("plant")
	if err != nil {
		return err
	}
	s, err := r.ids.sealer(codec.RolePlant)
	if err != nil {
		return err
	}
	ps2, err := plantsvc.New(nc, s, plantsvc.Options{Loop: loop, Plant: pl, Wait: 60 * time.Millisecond, Log: r.log, Metrics: metrics.New("plant")})
	if err != nil {
		return err
	}
	r.run("plant", r.ctx, ps2.Run)
	nc, err = r.connect("actuator")
	if err != nil {
		return err
	}
	if s, err = r.ids.sealer(codec.RoleActuator); err != nil {
		return err
	}
	act, err := actuator.New(nc, s, actuator.Options{Loop: loop, Deadline: 30 * time.Millisecond, Log: r.log, Metrics: metrics.New("actuator"), OnApply: onApply})
	if err != nil {
		return err
	}
	r.run("actuator", r.ctx, act.Run)
	return waitFor(r.ctx, 30*time.Second, "actuator set-up", act.Ready)
}

// sniffSizes runs f with a subscriber on the loop's subjects and returns the
// largest envelope seen of each kind the floor mimics. The subscriber is gone
// before the measured ticks (it would add a delivery to every message).
func (r *rig) sniffSizes(loop string, f func() error) (FloorSizes, error) {
	var mu sync.Mutex
	var sz FloorSizes
	sub, err := r.admin.Subscribe(bus.Prefix+"."+loop+".>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		n := len(m.Data)
		switch {
		case strings.HasSuffix(m.Subject, ".measure.p0"):
			sz.Measure = max(sz.Measure, n)
		case m.Subject == bus.ExchangeSubject(loop, 0): // P1's Protocol 1 message (P0's is the same size; two hops: its pre-opening)
			sz.Exchange = max(sz.Exchange, n)
		case m.Subject == bus.OutputSubject(loop):
			sz.Output = max(sz.Output, n)
		case m.Subject == bus.PlantYSubject(loop): // the sensor's plant read
			sz.PlantRequest = max(sz.PlantRequest, n)
		}
	})
	if err != nil {
		return sz, err
	}
	if err := r.admin.Flush(); err != nil {
		return sz, err
	}
	err = f()
	_ = sub.Unsubscribe()
	_ = r.admin.Flush()
	mu.Lock()
	defer mu.Unlock()
	if err == nil && (sz.Measure == 0 || sz.Exchange == 0 || sz.Output == 0 || sz.PlantRequest == 0) {
		err = fmt.Errorf("bench: sniffed no complete tick (sizes %+v)", sz)
	}
	return sz, err
}

// tickRecorder collects the sensor's and the actuator's hooks.
type tickRecorder struct {
	mu      sync.Mutex
	uplain  map[uint64][]float64
	applied map[uint64]actuator.Applied
	wake    chan uint64
	sent    uint64 // measurements sent (the parties' state version after they complete)

	// partiesAt reports whether both parties have completed v ticks (in
	// process, their state is at version v or later; as processes, their
	// duet_ticks_total is), asked every poll (default 50 µs) until they have.
	partiesAt func(v uint64) bool
	poll      time.Duration
	abandoned int
	desync    uint64 // first tick the parties did not complete (0: none)
}

func newTickRecorder() *tickRecorder {
	return &tickRecorder{uplain: map[uint64][]float64{}, applied: map[uint64]actuator.Applied{}, wake: make(chan uint64, 64)}
}

func (t *tickRecorder) onTick(tick uint64, _, uplain []float64) {
	t.mu.Lock()
	t.uplain[tick] = append([]float64(nil), uplain...)
	t.sent++
	t.mu.Unlock()
}

func (t *tickRecorder) onApply(a actuator.Applied) {
	a.U = append([]float64(nil), a.U...)
	t.mu.Lock()
	t.applied[a.Tick] = a
	t.mu.Unlock()
	select {
	case t.wake <- a.Tick:
	default:
	}
}

// run sends ticks first, first+1, ... (n of them) through the sensor, each
// after the previous one was applied (or missed) and both parties completed
// it (Protocol 2 and persistence included), with a gap: ticks never overlap.
func (t *tickRecorder) run(ctx context.Context, sn *sensor.Sensor, first uint64, n int, gap time.Duration) error {
	for i := 0; i < n; i++ {
		tick := first + uint64(i)
		if err := sn.RunN(ctx, 1); err != nil {
			return err
		}
		deadline := time.After(time.Second)
	wait:
		for {
			t.mu.Lock()
			_, ok := t.applied[tick]
			t.mu.Unlock()
			if ok {
				break
			}
			select {
			case <-t.wake:
			case <-deadline:
				break wait // counted as a miss
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		t.mu.Lock()
		want := t.sent
		t.mu.Unlock()
		if t.partiesAt != nil {
			poll := t.poll
			if poll <= 0 {
				poll = 50 * time.Microsecond
			}
			give := time.Now().Add(time.Second)
			for !t.partiesAt(want) && time.Now().Before(give) {
				time.Sleep(poll)
			}
			if !t.partiesAt(want) {
				t.abandoned++
				if t.desync == 0 {
					t.desync = tick
				}
				// Resynchronize the expectation with what the parties did.
				t.mu.Lock()
				t.sent--
				t.mu.Unlock()
			}
		}
		sleep(gap)
	}
	return nil
}

// results returns the latencies of the applied ticks in [from, to], the
// misses (deadline misses and ticks never applied) and max |u - uplain|.
func (t *tickRecorder) results(from, to uint64) ([]time.Duration, int, float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lat []time.Duration
	misses, maxDiff := 0, 0.0
	for tick := from; tick <= to; tick++ {
		a, ok := t.applied[tick]
		if !ok || a.Miss {
			misses++
			continue
		}
		lat = append(lat, a.Latency)
		if t.desync != 0 && tick >= t.desync {
			continue // the parties' state no longer follows the float64 controller's
		}
		up := t.uplain[tick]
		for i := range a.U {
			if i < len(up) {
				maxDiff = math.Max(maxDiff, math.Abs(a.U[i]-up[i]))
			}
		}
	}
	return lat, misses, maxDiff
}

// tickPaths reads the two-hop tick's counters: the masked measurements the
// sensor has sent and each party's fallbacks to three hops (a party
// process's from its /metrics).
func (r *rig) tickPaths(ctx context.Context, sensor *metrics.Set) (masked float64, fallback [2]float64, err error) {
	masked = metrics.SumBy(sensor.TickPaths, "path")["two_hop"]
	for i, m := range r.pm {
		if m != nil {
			fallback[i] = metrics.SumBy(m.TickPaths, "path")["fallback"]
		}
	}
	for _, p := range r.procList() {
		mfs, err := p.metrics(ctx)
		if err != nil {
			return masked, fallback, err
		}
		var c partyCounts
		c.add(mfs)
		fallback[p.id] = c.fallback
	}
	return masked, fallback, nil
}
