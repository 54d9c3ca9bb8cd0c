package bench

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// runScalePoint runs one step; its goroutines are the harness's (roles.go)
// but for the parties', the dealers' and the server's.
func runScalePoint(ctx context.Context, opt ScaleOptions, n, try int) (row ScaleRow, err error) {
	withRole(ctx, RoleHarness, func(ctx context.Context) { row, err = scalePoint(ctx, opt, n, try) })
	return row, err
}

// scalePoint sets up n loops, measures their own floor, runs them for
// opt.Warmup and opt.Duration and returns the step's row.
func scalePoint(ctx context.Context, opt ScaleOptions, n, try int) (ScaleRow, error) {
	row := ScaleRow{Loops: n, Try: try, Period: opt.Period, Persist: !opt.NoPersist, WriteCoalesce: party.WriteCoalesceFor(opt.WriteCoalesce)}
	// Every step starts as the first one does, without the garbage of the
	// steps before it (their rigs are closed; no deployment has it). This
	// step's own set-up garbage, the dealers' prefilled queues, stays.
	quiesce()
	began := time.Now()
	r, err := newRig(ctx, opt.URL, opt.Log)
	if err != nil {
		return row, err
	}
	defer r.close()
	r.peerBatch, r.writeCoalesce, r.stateFile = opt.PeerBatch, opt.WriteCoalesce, opt.StateFileStore
	r.partyBin, row.PartyProcs = opt.PartyBin, opt.PartyBin != ""
	r.inProc, row.InProcess = opt.InProcess, opt.InProcess != nil
	r.prefetch, row.Prefetch = opt.Prefetch, party.PrefetchFor(opt.Prefetch)
	r.twoHop, row.TwoHop = opt.TwoHop, opt.TwoHop
	row.StateFileStore = opt.StateFileStore && row.Persist
	row.Variant = opt.Variant
	row.LiveDealers = opt.LiveDealers
	ticksPerLoop := int((opt.Warmup+opt.Duration)/opt.Period) + 10
	// Each queue alone holds an item for every tick of the step, and a
	// margin; what the parties have pulled before the first tick (up to
	// about three times their prefetch) is more margin. The dealers are
	// stopped during the measurement, so nothing else needs the items: more
	// would only add to the heap that the one process's collector marks
	// and sweeps while it serves the loops.
	lowWater := ticksPerLoop + 32
	run := uniqueTag()
	loops := make([]string, n)
	for i := range loops {
		loops[i] = fmt.Sprintf("s%s-%d", run, i)
	}
	rz, err := setupLoops(r, opt, loops, lowWater)
	if err != nil {
		return row, err
	}
	prm := rz.Params
	if err := r.startParties(loops, !opt.NoPersist, nil); err != nil {
		return row, err
	}
	stopDealers, err := r.startDealers(2, dealer.Options{LowWater: lowWater, Poll: 200 * time.Millisecond})
	if err != nil {
		return row, err
	}
	// A party process that exits (a wrong binary, a configuration it
	// refuses) ends the wait at once, with its output.
	if err := waitFor(ctx, 5*time.Minute, "parties' set-up", func() bool { return r.procExited() != nil || r.partiesReady() }); err != nil {
		return row, err
	}
	if err := r.procExited(); err != nil {
		return row, err
	}
	if err := r.waitQueues(ctx, loops, lowWater, 10*time.Minute); err != nil {
		return row, err
	}
	stopDealers()
	row.Setup = time.Since(began)
	if !opt.ColdHeap {
		row.PrefaultMB = float64(prefaultHeap()) / (1 << 20)
	}
	if opt.LiveDealers > 0 {
		// Two replicas that check the queues through the floor and the
		// step as deployed dealers do, at the services' DUET_POLL and this
		// DUET_POLL_MAX, without refilling (a low-water mark of one item):
		// what their checks cost the server and the parties' cores.
		if _, err := r.startDealers(2, dealer.Options{LowWater: 1, Poll: 50 * time.Millisecond, PollMax: opt.LiveDealers}); err != nil {
			return row, err
		}
	}

	// The floor first, on the same server, with this loop's message sizes.
	if err := stepFloor(ctx, opt, r, &row, loops[0], prm); err != nil {
		return row, err
	}

	ls, unsubscribe, err := startLightLoops(r, opt, loops, rz)
	if err != nil {
		return row, err
	}
	defer unsubscribe()
	// The step's profile and tick series: scale-<loops>[-persist][-try<k>].*
	name := fmt.Sprintf("scale-%d", n)
	if !opt.NoPersist {
		name += "-persist"
	}
	if opt.Repeat > 1 {
		name += fmt.Sprintf("-try%d", try)
	}
	// The CPU by role (roles.go) from a profile of the measured ticks
	// (warm-up included); with ProfileDir the profile and the extras of
	// startCPUProfile are written there.
	if opt.ProfileDir != "" {
		defer startProfileExtras(filepath.Join(opt.ProfileDir, name))()
	}
	prof := startRoleProfile()
	defer prof.stop()
	// The parties' counters and the collector's, read when the measured
	// ticks begin and once they are all answered (the warm-up's ticks are
	// not in Ticks, so they stay out of these too).
	var readErr error // a party process's counters could not be read
	read := func() stepCounts {
		c, err := r.readCounts(ctx, opt.Server)
		if err != nil && readErr == nil {
			readErr = err
		}
		return c
	}
	cm, procCPU0, faults0 := startCPUMeter(), r.procCPU(), minorFaults()
	mon := startStallMonitor()
	var wm waitMeter
	start := time.Now()
	measureFrom := start.Add(opt.Warmup)
	stopAt := measureFrom.Add(opt.Duration)
	atStart := make(chan stepCounts, 1)
	atStartDone := make(chan struct{}) // closed once the goroutine below has returned
	go func() {
		defer close(atStartDone)
		select {
		case <-time.After(time.Until(measureFrom)):
		case <-ctx.Done():
			return // the step is cut short: nothing to read
		}
		wm = startWaitMeter()
		atStart <- read()
	}()
	var sendWG sync.WaitGroup
	for i, l := range ls {
		sendWG.Add(1)
		go func() {
			defer sendWG.Done()
			// Loops are spread evenly over the period, as independent plants would be.
			time.Sleep(time.Duration(i) * opt.Period / time.Duration(n))
			l.run(ctx, opt.Period, measureFrom, stopAt)
		}()
	}
	sendWG.Wait()
	if err := ctx.Err(); err != nil {
		// Ctrl-C cut the measured ticks short: what ran is no step (and
		// nothing reads the rig, which the caller then closes).
		mon.End()
		<-atStartDone
		return row, err
	}
	c0 := <-atStart // wm is set
	waited := wm.end()
	wall := time.Since(start)
	st := mon.End()
	row.Stalls, row.StallMax = st.Count, st.Worst
	row.RSS = processRSS()
	// The CPU over the same wall time as it is divided by (the drain's
	// sleep below is not in it).
	row.CPU, row.Steal = cm.cores(wall)
	row.FaultsPerSec = float64(minorFaults()-faults0) / wall.Seconds()
	procCPU1 := r.procCPU()
	roles, raw, err := prof.stop() // the CPU by role over the same window
	time.Sleep(opt.Deadline + 100*time.Millisecond)
	if err != nil {
		// The split is an addition to the step's figures, not one of
		// them: without it the row says n/a.
		r.log.Warn("bench: CPU by role not measured", "loops", n, "err", err)
	}
	row.Roles = roles
	if r.partyBin != "" {
		// The parties' CPU is their processes', not this one's.
		for i := range row.Roles.Party {
			row.Roles.Party[i] = (procCPU1[i] - procCPU0[i]) / wall.Seconds()
			row.CPU += row.Roles.Party[i] // NaN if unreadable: then unknown
		}
	}
	if opt.ServerOutside {
		row.serverOutside()
	}
	if opt.ProfileDir != "" && raw != nil {
		if err := os.WriteFile(filepath.Join(opt.ProfileDir, name+".pprof"), raw, 0o644); err != nil {
			return row, err
		}
	}
	c1 := read()
	if readErr != nil {
		return row, readErr
	}
	row.addResults(ls, opt.Deadline)
	row.addCounts(c0, c1, r.partyBin != "")
	row.SchedP99, row.SyscallsPerTick = waited.SchedP99, perTick(waited.Syscalls, row.Ticks)
	if opt.ProfileDir != "" {
		if err := writeTickSeries(filepath.Join(opt.ProfileDir, name+".ticks.csv"), ls, measureFrom); err != nil {
			return row, err
		}
		if err := writeGCSeries(filepath.Join(opt.ProfileDir, name+".gc.csv"), measureFrom, stopAt.Add(opt.Deadline)); err != nil {
			return row, err
		}
		if err := writeConnCounts(filepath.Join(opt.ProfileDir, name+".conns.csv"), c0.broker, c1.broker, row.Ticks); err != nil {
			return row, err
		}
	}
	row.OK = row.Misses == 0 && row.Wrong == 0 && row.P99 < opt.P99Limit && row.Ticks > 0
	return row, nil
}

// setupLoops sets up the step's loops as the real sensor does, in parallel
// on a few connections, and returns the first loop's resolved controller
// (every loop's is the same).
func setupLoops(r *rig, opt ScaleOptions, loops []string, lowWater int) (mpc.Resolved, error) {
	var rz mpc.Resolved
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for w := 0; w < 8; w++ {
		nc, err := r.connect(fmt.Sprintf("setup%d", w))
		if err != nil {
			mu.Lock()
			firstErr = cmp.Or(firstErr, err)
			mu.Unlock()
			break // the workers already started stop at their next loop
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				mu.Lock()
				failed := firstErr != nil
				mu.Unlock()
				if i >= len(loops) || failed {
					return
				}
				sn, err := r.setupLoop(nc, loopSpec{Loop: loops[i], Controller: opt.Controller, Variant: opt.Variant, Compress: opt.Compress,
					QueueMax: int64(2*lowWater + 256), ItemsPerMsg: opt.ItemsPerMsg})
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil && i == 0 {
					rz = sn.Resolved()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return rz, firstErr
}

// stepFloor measures the step's own floor: its loops' messages relayed
// without computation, on the same server, before the loops run.
func stepFloor(ctx context.Context, opt ScaleOptions, r *rig, row *ScaleRow, loop string, prm mpc.Params) error {
	sizes, err := envelopeSizes(r.ids, loop, prm)
	if err != nil {
		return err
	}
	mon := startStallMonitor()
	fm, fw, fprof := startCPUMeter(), startWaitMeter(), startRoleProfile()
	fr, err := floorLoops(ctx, opt.URL, opt.InProcess, sizes, row.Loops, opt.Period, opt.Warmup, opt.Duration, opt.Deadline)
	row.FloorCPU, row.FloorSteal = fm.cores(0)
	var perr error
	if row.FloorRoles, _, perr = fprof.stop(); perr != nil {
		r.log.Warn("bench: the floor's CPU by role not measured", "loops", row.Loops, "err", perr)
	}
	fwaits := fw.end()
	st := mon.End()
	row.FloorStalls, row.FloorStallMax = st.Count, st.Worst
	if err != nil {
		return err
	}
	fs := Summarize(fr.Lat)
	row.FloorTicks, row.FloorMisses, row.FloorP50, row.FloorP99 = fr.Sent, fr.Misses, fs.P50, fs.P99
	row.FloorSchedP99, row.FloorSyscallsPerTick = fwaits.SchedP99, perTick(fwaits.Syscalls, fr.All)
	return nil
}

// startLightLoops makes the step's light sensor + actuator of each loop, on
// opt.Clients connections, and subscribes them to their outputs (and mask
// shares); unsubscribe ends the subscriptions.
func startLightLoops(r *rig, opt ScaleOptions, loops []string, rz mpc.Resolved) (ls []*lightLoop, unsubscribe func(), err error) {
	var subs []*nats.Subscription
	unsubscribe = func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}
	defer func() {
		if err != nil {
			unsubscribe()
		}
	}()
	bound := sim.OutputBound(opt.Controller, rz)
	clients := make([]*nats.Conn, opt.Clients)
	for i := range clients {
		if clients[i], err = r.connect(fmt.Sprintf("client%d", i)); err != nil {
			return nil, nil, err
		}
	}
	ls = make([]*lightLoop, len(loops))
	byLoop := make(map[string]*lightLoop, len(loops))
	for i := range ls {
		if ls[i], err = newLightLoop(r.ids, clients[i%len(clients)], loops[i], opt.Controller, rz.Params, bound, opt.TwoHop); err != nil {
			return nil, nil, err
		}
		byLoop[loops[i]] = ls[i]
	}
	// One subscription for every loop's output shares, as an actuator
	// service for many loops would have: a goroutine per loop would add a
	// wake-up per message that the parties' cores pay for.
	subscribe := func(nc *nats.Conn, subject string, on func(*lightLoop, *nats.Msg)) error {
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			if l := byLoop[bus.SubjectLoop(m.Subject)]; l != nil {
				on(l, m)
			}
		})
		if err != nil {
			return err
		}
		subs = append(subs, sub)
		return sub.SetPendingLimits(-1, -1)
	}
	if err := subscribe(clients[0], bus.OutputSubject("*"), (*lightLoop).onOutput); err != nil {
		return nil, nil, err
	}
	if opt.TwoHop {
		// The parties' mask shares, one subscription for every loop too,
		// on another connection than the outputs'.
		if err := subscribe(clients[len(clients)-1], bus.MaskYSubject("*"), (*lightLoop).onMask); err != nil {
			return nil, nil, err
		}
	}
	for _, nc := range clients {
		if err := nc.Flush(); err != nil {
			return nil, nil, err
		}
	}
	return ls, unsubscribe, nil
}

// stepCounts are the parties' counters and the collector's that a scale
// step reads when its measured ticks begin and once they are all answered.
type stepCounts struct {
	party           partyCounts // both parties', in the bench's process or their own (alloc and gcs: the party processes' own heaps)
	gcs             uint32
	alloc           uint64
	gcCPU, gcAssist float64 // seconds
	broker          brokerCounts
}

// readCounts reads the step's counters. An error (a party process's or the
// server's counters could not be read) comes with what could be read.
func (r *rig) readCounts(ctx context.Context, srv *server.Server) (c stepCounts, readErr error) {
	c.party = partyCounts{abandoned: map[string]float64{}, rejects: map[string]float64{}}
	if r.partyBin != "" {
		pc, err := r.procCounts(ctx)
		if err != nil {
			readErr = err
		}
		c.party = pc
	}
	for _, m := range r.pm {
		if m != nil { // nil: a party process's (above)
			c.party.addSet(m)
		}
	}
	// One read of the runtime's metrics (no stop-the-world, unlike
	// runtime.ReadMemStats, at the start of the measured ticks).
	gc := []rtmetrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/allocs:bytes"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/assist:cpu-seconds"}}
	rtmetrics.Read(gc)
	c.gcs, c.alloc = uint32(gc[0].Value.Uint64()), gc[1].Value.Uint64()
	c.gcCPU, c.gcAssist = gcSeconds(gc[2]), gcSeconds(gc[3])
	var err error
	if c.broker, err = readBroker(srv); err != nil && readErr == nil {
		readErr = err
	}
	return c, readErr
}

// addResults adds the light loops' ticks, misses, wrong inputs and
// latencies to the row.
func (r *ScaleRow) addResults(ls []*lightLoop, deadline time.Duration) {
	var lat []time.Duration
	for _, l := range ls {
		ll, sent, misses, wrong := l.results(deadline)
		lat = append(lat, ll...)
		r.Ticks += sent
		r.TwoHopTicks += l.maskedSent()
		r.Misses += misses
		r.Wrong += wrong
	}
	s := Summarize(lat)
	r.P50, r.P99 = s.P50, s.P99
}

// addCounts adds what the counters read at the measured ticks' start (c0)
// and end (c1) say to the row, per tick where it says so (addResults first).
// partyProcs: the parties ran in processes of their own.
func (r *ScaleRow) addCounts(c0, c1 stepCounts, partyProcs bool) {
	r.PartyMisses, r.NoItem, r.PartyHeld = c1.party.misses-c0.party.misses, c1.party.noItem-c0.party.noItem, c1.party.held-c0.party.held
	r.FallbackTicks = int(c1.party.fallback - c0.party.fallback)
	r.PartyRejects = map[string]int{}
	for reason, v := range c1.party.rejects {
		if d := int(v - c0.party.rejects[reason]); d > 0 {
			r.PartyRejects[reason] = d
		}
	}
	r.PartyAbandoned = map[string]int{}
	for reason, v := range c1.party.abandoned {
		if d := int(v - c0.party.abandoned[reason]); d > 0 {
			r.PartyAbandoned[reason] = d
		}
	}
	r.GCs = int(c1.gcs - c0.gcs)
	r.GCCPU = time.Duration((c1.gcCPU - c0.gcCPU) * 1e9)
	r.GCAssist = time.Duration((c1.gcAssist - c0.gcAssist) * 1e9)
	r.PartyAllocPerTick = math.NaN()
	if partyProcs {
		r.PartyGCs = int(c1.party.gcs - c0.party.gcs)
		r.PartyAllocPerTick = perTick(c1.party.alloc-c0.party.alloc, r.Ticks)
	}
	if r.Ticks > 0 {
		r.AllocPerTick = float64(c1.alloc-c0.alloc) / float64(r.Ticks)
		r.PeerMsgsPerTick = (c1.party.peerMsgs - c0.party.peerMsgs) / float64(r.Ticks)
		r.PeerEnvsPerTick = (c1.party.envs - c0.party.envs) / float64(r.Ticks)
		r.PeerHeldPerTick = (c1.party.peerHeld - c0.party.peerHeld) / float64(r.Ticks)
	}
	r.BrokerInPerTick, r.BrokerOutPerTick = c1.broker.perTickSince(c0.broker, r.Ticks)
}
