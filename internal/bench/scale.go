package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// Loops per party pair: one P0 and one P1 service (internal/party, one
// process each in production, one NATS connection each here) serve N loops
// at 25 Hz. Each loop is set up by the real sensor (its own offline queue,
// consumers and sealed set-up records) and prefilled by real dealer
// replicas, which are then stopped so that they cost nothing during the
// measurement. The client side is lighter than N sensor + actuator + plant
// services: one goroutine per loop plays the sensor (encode, share, seal to
// each party, publish; no plant request, no tick notice) and the actuator
// (open both output shares, reconstruct, decode, and check u against the
// float64 controller on the same y within sim.OutputBound). The parties
// cannot tell the difference: they receive the same messages.
//
// A tick is a miss if its two output shares have not both arrived within the
// deadline (30 ms, the actuator's default) or reconstruct to a wrong u.

// ScaleOptions configure RunScale.
type ScaleOptions struct {
	URL        string
	Loops      []int         // tried in order; the search stops at the first failure
	Duration   time.Duration // measured per step (default 6 s)
	Warmup     time.Duration // unmeasured first (default 1 s)
	Period     time.Duration // tick period (default 40 ms: 25 Hz)
	Deadline   time.Duration // default 30 ms
	P99Limit   time.Duration // default 10 ms
	Controller mpc.ControllerSpec
	Variant    mpc.Variant
	Compress   bool
	NoPersist  bool
	Clients    int // client connections (default 4)
	// PeerBatch is the parties' party.Options.PeerBatch (0: the default).
	PeerBatch int
	// Prefetch is the parties' party.Options.Prefetch (0: the default).
	Prefetch int
	// WriteCoalesce is the parties' DUET_WRITE_COALESCE (0: the default;
	// negative: off).
	WriteCoalesce time.Duration
	// ItemsPerMsg is the sensors' items per stream message (0: the default).
	ItemsPerMsg int
	// TwoHop runs the loops with the two-hop tick (DUET_TWO_HOP, on in the
	// shipped deployments): the parties pre-open each next item and send
	// the light sensors their mask shares, which send a masked measurement
	// when both are in, as the sensor service does.
	TwoHop bool
	// StateFileStore puts the parties' persisted state in JetStream file
	// storage (DUET_STATE_FILE_STORE, the services' default); false: memory.
	StateFileStore bool
	// LiveDealers, if set, keeps two dealer replicas checking the queues
	// during each step's floor and loops (DUET_POLL 50 ms, this
	// DUET_POLL_MAX; 50 ms checks every 50 ms, as dealers did before the
	// thirty-seventh session); 0: the dealers stop once the queues are full.
	LiveDealers time.Duration
	// ServerOutside says the NATS server at URL runs in another process
	// (duet bench --nats): its CPU is not in this process's profile, so
	// the server's share of a step (and of its floor) is NaN, not 0.
	ServerOutside bool
	// Server is the embedded NATS server at URL (nil when it runs in
	// another process): its message counters are read before and after
	// each step's measured ticks.
	Server *server.Server
	// Budget stops the search before a loop count that would start after
	// it has elapsed (0: no limit), and OnBudget, if set, is then called
	// with that count.
	Budget   time.Duration
	OnBudget func(next int)
	// Repeat is how many steps run at each loop count (0: one). A count
	// holds only if every one of them held; the search stops after the
	// first count that did not.
	Repeat int
	// PartyBin, if set, runs the two parties as this binary (a build of
	// cmd/party), each in its own process configured by its DUET_
	// variables, instead of inside this process (partyproc.go): the
	// deployment's shape. Their CPU is read from /proc and added to the
	// step's; the profile, the collector's and the run-queue figures are
	// this process's (server and harness) only.
	PartyBin string
	// InProcess, if set, connects the loops' services (parties, sensors,
	// actuators) and each step's floor to the embedded server through it
	// (the server's InProcessConn: in-memory pipes, inproc.go) instead of
	// over loopback TCP to URL; nil: TCP. Not with PartyBin or
	// ServerOutside: another process cannot share this one's memory.
	InProcess nats.InProcessConnProvider
	// ColdHeap leaves each step's heap as its set-up leaves it: the heap
	// then grows toward its collection's goal during the floor and the
	// loops, faulting in a page at a time what it grows into (10-30
	// thousand faults a second at 400 loops, at 10-15 µs each on the VM
	// the README's figures come from). Otherwise (the default) the step's
	// headroom is faulted in after the set-up (prefaultHeap), as the pages
	// of a process that has served its load for a while are.
	ColdHeap bool
	// ProfileDir, if set, receives a CPU profile of each step's measurement
	// window (scale-<loops>[-persist][-try<k>].pprof; -try<k> with Repeat > 1).
	ProfileDir string
	Log        *slog.Logger
	// OnStep, if set, is called after each step (progress).
	OnStep func(ScaleRow)
}

// serverOutside marks the server's CPU, in the step and in its floor, as
// not measured: a server in another process is not in this process's
// profile (its 0 would read as a server that cost nothing).
func (r *ScaleRow) serverOutside() {
	r.Roles.Broker, r.FloorRoles.Broker = math.NaN(), math.NaN()
}

// ScaleRow is one step of the search.
type ScaleRow struct {
	Loops    int
	Period   time.Duration // each loop's tick period
	Ticks    int           // measured ticks sent
	P50, P99 time.Duration
	Misses   int
	Wrong    int // reconstructed u outside the bound of the float64 controller
	OK       bool
	CPU      float64 // process CPU seconds per wall second during the measurement
	// FloorCPU is the same for the floor's run (warm-up included): what the
	// bare messaging of these loops costs on this machine.
	FloorCPU float64
	// Steal and FloorSteal are the CPU the hypervisor took from the machine
	// during each (cores; NaN where it cannot be read): a shared VM's other
	// tenants, not the code under test.
	Steal, FloorSteal float64
	Setup             time.Duration
	Persist           bool // the parties persisted their state every tick
	// The floor at the same number of loops (floorLoops), measured just
	// before on the same server.
	FloorTicks, FloorMisses int
	FloorP50, FloorP99      time.Duration
	// Stalls counts wake-ups of a 1 ms sleeper more than 5 ms late during
	// the measurement (the floor's in FloorStalls); StallMax is the worst.
	Stalls, FloorStalls     int
	StallMax, FloorStallMax time.Duration
	// RSS is the bench process's resident memory at the end of the
	// measurement, MB (NaN: unknown): the server's queues and the parties'
	// prefetched items of this step among it.
	RSS float64
	// What the parties counted during the measurement (both parties): ticks
	// they abandoned, and ticks that found no offline item within ItemWait.
	PartyMisses, NoItem int
	// PartyAbandoned splits PartyMisses by reason (duet_ticks_abandoned_total).
	PartyAbandoned map[string]int
	// PartyHeld counts the measurements the parties held for a late tick
	// (duet_measurements_held_total).
	PartyHeld int
	// PartyRejects counts the inbound messages the parties refused during
	// the measurement, by reason (duet_rejects_total): the harness sends
	// only well-formed messages, so anything but "overload" (a queue full
	// under load) is a bug of the pipeline's own.
	PartyRejects map[string]int
	// WriteCoalesce is the parties' write coalescing interval (0: off).
	WriteCoalesce time.Duration
	// Prefetch is the parties' offline items per pull and loop.
	Prefetch int
	// StateFileStore: the state was persisted to JetStream file storage
	// (false: memory, or not persisted).
	StateFileStore bool
	// Variant is the loops' Protocol 1 variant (the sensors' DUET_MASK).
	Variant mpc.Variant
	// Try numbers the steps at one loop count, from 1 (ScaleOptions.Repeat).
	Try int
	// PartyProcs: the parties ran as processes of their own
	// (ScaleOptions.PartyBin).
	PartyProcs bool
	// InProcess: the loops and the step's floor were connected to the
	// embedded server in process, not over TCP (ScaleOptions.InProcess).
	InProcess bool
	// PrefaultMB is the heap faulted in after the set-up (prefaultHeap;
	// 0 with ScaleOptions.ColdHeap), and FaultsPerSec the process's minor
	// page faults a second while the loops ran (their warm-up and measured
	// ticks, the interval CPU is measured over).
	PrefaultMB, FaultsPerSec float64
	// TwoHop: the loops ran the two-hop tick (ScaleOptions.TwoHop). Of the
	// measured ticks, TwoHopTicks went out as masked measurements and
	// FallbackTicks counts those a party still ran in three hops (both
	// parties' fallbacks).
	TwoHop                     bool
	TwoHopTicks, FallbackTicks int
	// The collector during the measurement (the whole process: server,
	// parties, harness): completed cycles, and bytes allocated per measured
	// tick; the CPU the collector used in the cycles that ended during the
	// measurement (runtime/metrics /cpu/classes/gc/total: marking, assists
	// and pauses), and of that the assists, the marking taken from
	// goroutines that allocate while a cycle runs (the parties' and the
	// server's among them), which delays their messages directly.
	GCs             int
	AllocPerTick    float64
	GCCPU, GCAssist time.Duration
	// With PartyProcs, the same for the party processes' own heaps (both
	// added, read from their /metrics): bytes they allocated per measured
	// tick and collections they completed during the measurement; NaN and
	// 0 when the parties ran in the bench's process (their allocations are
	// then in AllocPerTick).
	PartyAllocPerTick float64
	PartyGCs          int
	// The parties' messages to each other per tick sent: NATS messages, and
	// the protocol messages they carried (fewer messages when batched).
	PeerMsgsPerTick, PeerEnvsPerTick float64
	// PeerHeldPerTick is P0's Protocol 2 messages held for the deferred
	// work's batch per tick sent (duet_peer_held_total).
	PeerHeldPerTick float64
	// The NATS messages the server received and sent per tick sent, over
	// the measurement, the parties', the harness's and JetStream's (NaN
	// with the server in another process).
	BrokerInPerTick, BrokerOutPerTick float64
	// LiveDealers is ScaleOptions.LiveDealers: the DUET_POLL_MAX of the
	// dealers that went on checking the queues during the step (0: the
	// dealers stopped once the queues were full).
	LiveDealers time.Duration
	// Where a loaded step's ticks wait (waits.go), over the measurement
	// (the floor's over its whole run, warm-up included): the p99 of the
	// process's run-queue waits, and its read and write system calls per
	// tick sent.
	SchedP99, FloorSchedP99               time.Duration
	SyscallsPerTick, FloorSyscallsPerTick float64
	// Roles is the CPU by role over the measured ticks, warm-up included
	// (roles.go): each party, the broker, the harness (sensors and
	// actuators), the collector's background work and the rest. FloorRoles
	// is the same for the floor's run, whose two relays stand for the
	// parties.
	Roles, FloorRoles RoleCPU
}

// partyGCs is PartyGCs, NaN (unknown) unless the parties ran as processes.
func (r ScaleRow) partyGCs() float64 {
	if !r.PartyProcs {
		return math.NaN()
	}
	return float64(r.PartyGCs)
}

func (o *ScaleOptions) defaults() {
	if o.Duration <= 0 {
		o.Duration = 6 * time.Second
	}
	if o.Warmup <= 0 {
		o.Warmup = time.Second
	}
	if o.Period <= 0 {
		o.Period = 40 * time.Millisecond
	}
	if o.Deadline <= 0 {
		o.Deadline = 30 * time.Millisecond
	}
	if o.P99Limit <= 0 {
		o.P99Limit = 10 * time.Millisecond
	}
	if o.Clients <= 0 {
		o.Clients = 4
	}
}

// RunScale runs the search.
func RunScale(ctx context.Context, opt ScaleOptions) ([]ScaleRow, error) {
	opt.defaults()
	if opt.InProcess != nil && (opt.PartyBin != "" || opt.ServerOutside) {
		return nil, ErrInProcess
	}
	var rows []ScaleRow
	began := time.Now()
	for _, n := range opt.Loops {
		if opt.Budget > 0 && time.Since(began) > opt.Budget {
			if opt.OnBudget != nil {
				opt.OnBudget(n)
			}
			break
		}
		held := true
		for try := 1; try <= max(opt.Repeat, 1); try++ {
			row, err := runScalePoint(ctx, opt, n, try)
			if err != nil {
				return rows, fmt.Errorf("bench: scale with %d loops (try %d): %w", n, try, err)
			}
			rows = append(rows, row)
			if opt.OnStep != nil {
				opt.OnStep(row)
			}
			held = held && row.OK
		}
		if !held {
			break
		}
	}
	return rows, nil
}

// ScaleFloorRow is the floor alone (floorLoops: bare messaging in the
// loop's topology and message sizes, no parties) at a number of loops.
type ScaleFloorRow struct {
	Loops, Ticks, Misses int
	P50, P99             time.Duration
	CPU                  float64 // process CPU seconds per wall second (warm-up included)
	Steal                float64 // the machine's CPU taken by the hypervisor, cores (NaN: unknown)
	// SchedP99 and SyscallsPerTick are as ScaleRow's (waits.go), over the
	// whole run (warm-up included).
	SchedP99        time.Duration
	SyscallsPerTick float64
	// Stalls and StallMax are as ScaleRow's, over the whole run; RSS is the
	// process's resident memory at its end, MB (NaN: unknown).
	Stalls   int
	StallMax time.Duration
	RSS      float64
}

// RunScaleFloor measures the floor alone at each of loops, with the
// message sizes of cs's loops in variant v (those of the scale search),
// connected in process through inProc when it is set (as the scale
// search's with ScaleOptions.InProcess).
func RunScaleFloor(ctx context.Context, url string, inProc nats.InProcessConnProvider, cs mpc.ControllerSpec, v mpc.Variant, loops []int, duration time.Duration) ([]ScaleFloorRow, error) {
	sizes, err := loopSizes(cs, v)
	if err != nil {
		return nil, err
	}
	var rows []ScaleFloorRow
	for _, n := range loops {
		// A baseline: without the garbage of the steps before it.
		quiesce()
		m, wm, mon := startCPUMeter(), startWaitMeter(), startStallMonitor()
		r, err := floorLoops(ctx, url, inProc, sizes, n, 40*time.Millisecond, time.Second, duration, 30*time.Millisecond)
		st := mon.End()
		if err != nil {
			return rows, fmt.Errorf("bench: floor alone with %d loops: %w", n, err)
		}
		cpu, steal := m.cores(0)
		w := wm.end()
		s := Summarize(r.Lat)
		rows = append(rows, ScaleFloorRow{Loops: n, Ticks: r.Sent, Misses: r.Misses, P50: s.P50, P99: s.P99, CPU: cpu, Steal: steal,
			SchedP99: w.SchedP99, SyscallsPerTick: perTick(w.Syscalls, r.All), Stalls: st.Count, StallMax: st.Worst, RSS: processRSS()})
	}
	return rows, nil
}

// uniqueTag is a short random tag for loop ids (loop ids travel in every
// header, so they are kept short, like a real deployment's).
func uniqueTag() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

// writeTickSeries writes every measured tick of the step as
// sent_ms,loop,latency_us (sent_ms from the start of the measurement;
// latency -1 if the tick never completed), for finding when the slow ticks
// happen (go tool trace, GODEBUG=gctrace=1).
func writeTickSeries(path string, ls []*lightLoop, from time.Time) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "sent_ms,loop,latency_us")
	for i, l := range ls {
		l.mu.Lock()
		for _, lt := range l.ticks {
			if !lt.sent || !lt.measured {
				continue
			}
			lat := -1.0
			if lt.done {
				lat = us(lt.lat)
			}
			fmt.Fprintf(w, "%.3f,%d,%.1f\n", float64(l.base.Add(lt.start).Sub(from))/1e6, i, lat)
		}
		l.mu.Unlock()
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeGCSeries writes the process's garbage collections that ended between
// from and to as end_ms,pause_us (end_ms from from, as sent_ms in the tick
// series; pause_us the collection's stop-the-world pauses), so that a burst
// of slow ticks can be matched with a collection.
func writeGCSeries(path string, from, to time.Time) error {
	var st debug.GCStats
	debug.ReadGCStats(&st)
	var b strings.Builder
	b.WriteString("end_ms,pause_us\n")
	// Most recent first; the runtime keeps the last 256.
	for i := len(st.PauseEnd) - 1; i >= 0; i-- {
		if end := st.PauseEnd[i]; !end.Before(from) && !end.After(to) {
			fmt.Fprintf(&b, "%.3f,%.1f\n", float64(end.Sub(from))/1e6, us(st.Pause[i]))
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// gcSeconds is a runtime/metrics CPU-seconds sample's value (0 if this Go
// does not have the metric).
func gcSeconds(s rtmetrics.Sample) float64 {
	if s.Value.Kind() != rtmetrics.KindFloat64 {
		return 0
	}
	return s.Value.Float64()
}

// AbandonedBy formats PartyAbandoned as "reason=n" pairs, sorted by reason
// and separated by spaces ("" if no tick was abandoned).
func (r ScaleRow) AbandonedBy() string { return byReason(r.PartyAbandoned) }

// RejectsBy formats PartyRejects the same way.
func (r ScaleRow) RejectsBy() string { return byReason(r.PartyRejects) }

// Rejected is the number of messages the parties refused.
func (r ScaleRow) Rejected() (n int) {
	for _, v := range r.PartyRejects {
		n += v
	}
	return n
}

// byReason formats counts as "reason=n" pairs, sorted by reason.
func byReason(m map[string]int) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
