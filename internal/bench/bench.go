package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/examples"
	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/demo"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/internal/stall"
	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

// Sections of a run, in order.
const (
	SectionFig5   = "fig5"
	SectionTick   = "tick"
	SectionDealer = "dealer"
	SectionScale  = "scale"
)

// AllSections lists the sections in the order they run.
var AllSections = []string{SectionFig5, SectionTick, SectionDealer, SectionScale}

// Options configure Run.
type Options struct {
	Quick    bool
	URL      string   // NATS server; empty: an embedded one (demo.StartServer)
	Out      string   // output directory (CSV, PNG, profiles)
	Sections []string // default AllSections
	// Examples is the directory of the pendulum's controller.json and
	// plant.json (default examples.QubeDir, read from the copy built into
	// duet when the working directory has none: sim.LoadSpecs).
	Examples string
	Profile  bool // write a CPU profile per section into Out/pprof/
	// Plan, if set, replaces PlanFor(Quick) (tests use a tiny one).
	Plan     *Plan
	Log      *slog.Logger
	Progress io.Writer // progress lines (nil: none)
}

// Embedded is Report.Server for a run on the bench's own in-process NATS
// server (no --nats).
const Embedded = "embedded"

// Report is everything a run measured.
type Report struct {
	Server string // Embedded or the URL
	Quick  bool
	// StateFileStore is Plan.StateFileStore: where the tick and scale
	// sections persisted the parties' state.
	StateFileStore bool
	// Prefetch is Plan.Prefetch: the parties' offline items per pull and
	// loop in the tick and scale sections (0: the default).
	Prefetch int
	// ScaleVariant is Plan.ScaleVariant: the Protocol 1 variant of the
	// scale search's loops.
	ScaleVariant mpc.Variant
	// PartyBin is Plan.PartyBin: the party binary the tick cases and the
	// scale search ran the parties as, in processes of their own ("":
	// inside the bench).
	PartyBin string
	// ScaleInProcess is Plan.ScaleInProcess: the scale search's loops and
	// floors were connected to the embedded server in process.
	ScaleInProcess bool
	// ScaleColdHeap is Plan.ScaleColdHeap: the scale steps ran on a heap
	// not faulted in.
	ScaleColdHeap bool
	// ScaleTwoHop is Plan.ScaleTwoHop: the scale search's loops ran the
	// two-hop tick.
	ScaleTwoHop bool
	// ScaleLiveDealers is Plan.ScaleLiveDealers.
	ScaleLiveDealers time.Duration
	Started          time.Time
	Took             time.Duration
	Fig5             []Fig5Row
	Tick             []TickRow
	Dealer           []DealerRow
	Scale            []ScaleRow
	// ScaleBudgetStop is the loop count before which the time budget
	// (Plan.ScaleBudget) stopped each scale search, 0 if it did not, and
	// ScaleCut says whether the search ended on an error (Ctrl-C, a step
	// that could not be set up) after the steps recorded (index 1: the
	// search with persistence, 0: without).
	ScaleBudgetStop [2]int
	ScaleCut        [2]bool
	// ScaleFloor is the floor alone at Plan.ScaleFloorLoops.
	ScaleFloor []ScaleFloorRow
	// ScaleLimit is the p99 limit of the scale search.
	ScaleLimit time.Duration
	// Idle is the machine with nothing of the bench running, before the
	// scale search and after the floor alone (Plan.IdleCheck).
	Idle []IdleRow
	// Machine is the machine's own speed at the start of the run
	// (machine.go; nil: not measured, Plan.MachineRTTs 0).
	Machine *MachineRow
}

// IdleRow is a stall monitor (internal/stall: a 1 ms sleeper) run for Took
// with nothing of the bench running: the machine's own freezes, which no
// software on it avoids. A freeze longer than a tick's deadline (30 ms)
// misses the ticks in flight, and at a CPU utilization ρ a freeze of F
// leaves a backlog that takes about F·ρ/(1−ρ) more to drain.
type IdleRow struct {
	When string // "before" the scale search, or "after" it
	Took time.Duration
	stall.Result
	// CPU is the bench process's own CPU during the check, in cores: near
	// zero when nothing of it ran (the sleeper's wake-ups and what the Go
	// runtime and the idle NATS server still do).
	CPU float64
}

// Plan is what a run measures: the sizes of each section.
type Plan struct {
	Fig5Ds      []int
	Fig5Reps    int
	Fig5Warmup  int
	Ticks       int
	TickWarmup  int
	TickBlock   int
	TickNs      []int
	DealerItems int
	ScaleLoops  []int
	ScaleDur    time.Duration
	ScaleBudget time.Duration
	// ScaleNoPersistLoops is the second search, with the parties' per-tick
	// state persistence off (DUET_PERSIST=false).
	ScaleNoPersistLoops []int
	// ScaleFloorLoops are loop counts at which the floor alone (bare
	// messaging, no parties) is measured: what this machine's messaging
	// allows before any computation.
	ScaleFloorLoops []int
	// IdleCheck is how long the machine's stalls are measured with nothing
	// of the bench running, before the scale search and after it (0: not).
	IdleCheck time.Duration
	// MachineRTTs is how many loopback round trips measure the machine's
	// speed at the start of the run (machine.go; 0: not measured).
	MachineRTTs int
	// PeerBatch is the parties' party.Options.PeerBatch in the tick and
	// scale sections (0: the default; 1: no batching).
	PeerBatch int
	// Prefetch is the parties' DUET_PREFETCH, offline items per pull and
	// loop, in the tick and scale sections (0: the default, 64).
	Prefetch int
	// ItemsPerMsg is the sensors' items per stream message in the scale
	// section (0: the default).
	ItemsPerMsg int
	// WriteCoalesce is the parties' DUET_WRITE_COALESCE in the tick and
	// scale sections (0: the default; negative: off).
	WriteCoalesce time.Duration
	// StateFileStore puts the parties' persisted state in JetStream file
	// storage in the tick and scale sections (DUET_STATE_FILE_STORE=true,
	// the services' default); false: in memory, the bench's default, which
	// its earlier results were measured with.
	StateFileStore bool
	// ScaleVariant is the Protocol 1 variant of the scale search's loops,
	// the sensors' DUET_MASK (the zero value: per-tick, the services'
	// default).
	ScaleVariant mpc.Variant
	// ScaleRepeat is how many steps the scale search runs at each loop
	// count; a count holds only if all of them held (0: one).
	ScaleRepeat int
	// PartyBin, if set, runs the parties of the tick cases and of the
	// scale search as this binary (a build of cmd/party), each in its own
	// process (TickOptions.PartyBin, ScaleOptions.PartyBin); "": inside the
	// bench.
	PartyBin string
	// ScaleTwoHop runs the scale search's loops with the two-hop tick
	// (DUET_TWO_HOP, ScaleOptions.TwoHop); false: three hops, the
	// services' default.
	ScaleTwoHop bool
	// ScaleLiveDealers keeps dealers checking the queues during the scale
	// steps, with this DUET_POLL_MAX (ScaleOptions.LiveDealers); 0: not.
	ScaleLiveDealers time.Duration
	// ScaleInProcess connects the scale search's loops, their floors and
	// the floor alone to the embedded server in process, not over loopback
	// TCP (ScaleOptions.InProcess; inproc.go). Needs the embedded server
	// and the parties inside the bench.
	ScaleInProcess bool
	// ScaleColdHeap runs each scale step on the heap its set-up leaves,
	// not faulted in beforehand (ScaleOptions.ColdHeap).
	ScaleColdHeap bool
}

// PlanFor returns the full or the --quick plan.
func PlanFor(quick bool) Plan {
	if quick {
		return Plan{Fig5Ds: []int{10, 50, 100}, Fig5Reps: 20, Fig5Warmup: 5, Ticks: 300, TickWarmup: 50, TickBlock: 50, TickNs: []int{4, 16, 32, 64},
			DealerItems: 2000, ScaleLoops: []int{25, 50}, ScaleDur: 2 * time.Second, ScaleBudget: time.Minute,
			ScaleNoPersistLoops: []int{25, 50}, ScaleFloorLoops: []int{500}, IdleCheck: 2 * time.Second, MachineRTTs: 200}
	}
	return Plan{Fig5Ds: []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}, Fig5Reps: 100, Fig5Warmup: 10, Ticks: 2000, TickWarmup: 100, TickBlock: 100,
		TickNs:      []int{4, 16, 32, 64},
		DealerItems: 5000, ScaleLoops: []int{50, 100, 200, 300, 400, 500, 600, 700, 850, 1000, 1250, 1500}, ScaleDur: 6 * time.Second,
		ScaleBudget: 2 * time.Minute, ScaleNoPersistLoops: []int{50, 100, 200, 300, 400, 500, 600, 700, 850, 1000, 1250, 1500},
		ScaleFloorLoops: []int{100, 200, 500, 1000}, IdleCheck: 10 * time.Second, MachineRTTs: 1000}
}

// Run runs the selected sections and writes their CSV files and plots into
// opt.Out as each section completes.
func Run(ctx context.Context, opt Options) (*Report, error) {
	if opt.Examples == "" {
		opt.Examples = examples.QubeDir
	}
	if len(opt.Sections) == 0 {
		opt.Sections = AllSections
	}
	for _, s := range opt.Sections {
		if !slices.Contains(AllSections, s) {
			return nil, fmt.Errorf("bench: unknown section %q (want some of %v)", s, AllSections)
		}
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opt.Progress == nil {
		opt.Progress = io.Discard
	}
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return nil, err
	}
	cs, ps, builtin, err := sim.LoadSpecs(filepath.Join(opt.Examples, "controller.json"), filepath.Join(opt.Examples, "plant.json"))
	for _, p := range builtin {
		fmt.Fprintf(opt.Progress, "bench: no %s here: using the copy built into duet\n", p)
	}
	if err != nil {
		return nil, err
	}
	rep := &Report{Server: bus.RedactURL(opt.URL), Quick: opt.Quick, Started: time.Now(), ScaleLimit: 10 * time.Millisecond}
	url := opt.URL
	if opt.Plan != nil && opt.Plan.ScaleInProcess && (url != "" || opt.Plan.PartyBin != "") {
		return nil, ErrInProcess
	}
	var ns *server.Server // embedded; nil with opt.URL
	if url == "" {
		// The server's goroutines (and their clients' read and write
		// loops) carry the broker's label: roles.go.
		var dir string
		withRole(ctx, RoleBroker, func(context.Context) { ns, dir, err = demo.StartServer() })
		if err != nil {
			return nil, err
		}
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
			os.RemoveAll(dir)
		}()
		url, rep.Server = ns.ClientURL(), Embedded
	}
	plan := PlanFor(opt.Quick)
	if opt.Plan != nil {
		plan = *opt.Plan
	}
	rep.StateFileStore, rep.ScaleVariant, rep.PartyBin, rep.ScaleTwoHop = plan.StateFileStore, plan.ScaleVariant, plan.PartyBin, plan.ScaleTwoHop
	rep.ScaleLiveDealers, rep.ScaleInProcess, rep.ScaleColdHeap = plan.ScaleLiveDealers, plan.ScaleInProcess, plan.ScaleColdHeap
	rep.Prefetch = plan.Prefetch
	pr := func(format string, a ...any) { fmt.Fprintf(opt.Progress, format+"\n", a...) }
	if plan.MachineRTTs > 0 {
		m, err := measureMachine(ctx, plan.MachineRTTs)
		if err != nil {
			return rep, err
		}
		rep.Machine = &m
		pr("bench: this machine: %s", m)
		if err := rep.write(opt.Out); err != nil {
			return rep, err
		}
	}
	for _, sec := range opt.Sections {
		stop, err := startProfile(opt, sec)
		if err != nil {
			return rep, err
		}
		t0 := time.Now()
		pr("bench: %s ...", sec)
		switch sec {
		case SectionFig5:
			err = runFig5Section(ctx, url, plan, rep, pr)
		case SectionTick:
			err = runTickSection(ctx, url, plan, cs, ps, opt.Log, rep, pr)
		case SectionDealer:
			err = runDealerSection(ctx, url, plan, cs, opt.Log, rep, pr)
		case SectionScale:
			prof := ""
			if opt.Profile {
				prof = filepath.Join(opt.Out, "pprof")
				if err = os.MkdirAll(prof, 0o755); err != nil {
					break
				}
			}
			err = runScaleSection(ctx, url, ns, plan, cs, prof, opt.Log, rep, pr)
		}
		stop()
		pr("bench: %s done in %v", sec, time.Since(t0).Round(100*time.Millisecond))
		if werr := rep.write(opt.Out); werr != nil && err == nil {
			err = werr
		}
		if err != nil {
			return rep, err
		}
	}
	rep.Took = time.Since(rep.Started)
	return rep, nil
}

func (rep *Report) write(dir string) error {
	if err := rep.WriteCSVs(dir); err != nil {
		return err
	}
	if len(rep.Fig5) > 0 {
		if err := rep.WriteFig5Plot(dir); err != nil {
			return err
		}
	}
	if len(rep.Scale) > 0 {
		if err := rep.WriteScalePlot(dir, us(rep.ScaleLimit)); err != nil {
			return err
		}
	}
	return nil
}

func runFig5Section(ctx context.Context, url string, plan Plan, rep *Report, pr func(string, ...any)) error {
	for _, s := range Fig5Series {
		rows, err := RunFig5(ctx, Fig5Options{URL: url, Ds: plan.Fig5Ds, Reps: plan.Fig5Reps, Warmup: plan.Fig5Warmup,
			Gap: time.Millisecond, Series: []Series{s}})
		rep.Fig5 = append(rep.Fig5, rows...)
		for _, r := range rows {
			pr("  %-18s d=%3d  mean %8.1fµs  p50 %8.1fµs  floor p50 %7.1fµs  ×%.2f  %d B/party",
				s.Name(), r.D, us(r.Lat.Mean), us(r.Lat.P50), us(r.Floor.P50), ratio(r.Lat.P50, r.Floor.P50), r.BytesPerParty())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// TickCases are the cases of tick.csv: the pendulum (fixed mask; per-tick and
// without persistence as extra rows) and random controllers of n states.
func TickCases(pendulum mpc.ControllerSpec, pendulumPlant plant.Spec, ns []int) []TickCase {
	cs := []TickCase{
		{Name: "pendulum", Controller: pendulum, Plant: pendulumPlant, Variant: mpc.FixedMask},
		{Name: "pendulum-pertick", Controller: pendulum, Plant: pendulumPlant, Variant: mpc.PerTick},
		{Name: "pendulum-nopersist", Controller: pendulum, Plant: pendulumPlant, Variant: mpc.FixedMask, NoPersist: true},
	}
	cs = append(cs, TickCase{Name: "pendulum-2hop", Controller: pendulum, Plant: pendulumPlant, Variant: mpc.FixedMask, TwoHop: true})
	for _, n := range ns {
		cs = append(cs, TickCase{Name: caseName(n), Controller: RandomController(n, 1, 1), Plant: BenchPlant(), Variant: mpc.FixedMask})
		if n == 32 {
			cs = append(cs, TickCase{Name: caseName(n) + "-2hop", Controller: RandomController(n, 1, 1), Plant: BenchPlant(), Variant: mpc.FixedMask, TwoHop: true})
		}
	}
	return cs
}

func runTickSection(ctx context.Context, url string, plan Plan, cs mpc.ControllerSpec, ps plant.Spec, log *slog.Logger, rep *Report, pr func(string, ...any)) error {
	for _, c := range TickCases(cs, ps, plan.TickNs) {
		row, err := RunTick(ctx, TickOptions{URL: url, Ticks: plan.Ticks, Warmup: plan.TickWarmup, Block: plan.TickBlock, Compress: true, Log: log, PeerBatch: plan.PeerBatch, Prefetch: plan.Prefetch, WriteCoalesce: plan.WriteCoalesce, StateFileStore: plan.StateFileStore, PartyBin: plan.PartyBin}, c)
		if err != nil {
			return fmt.Errorf("bench: tick %s: %w", c.Name, err)
		}
		rep.Tick = append(rep.Tick, row)
		paths := ""
		if c.TwoHop {
			paths = fmt.Sprintf("  two hops %d of %d ticks (fallback %d)", row.TwoHopTicks-row.FallbackTicks, row.Lat.N+row.Misses, row.FallbackTicks)
		}
		pr("  %-19s p50 %7.1fµs p99 %7.1fµs  floor p50 %6.1fµs p99 %6.1fµs  ×%.2f / ×%.2f  (from idle: floor p50 %6.1fµs, ×%.2f)  misses %d  abandoned %d  stolen %s cores%s",
			row.Case, us(row.Lat.P50), us(row.Lat.P99), us(row.Floor.P50), us(row.Floor.P99),
			ratio(row.Lat.P50, row.Floor.P50), ratio(row.Lat.P99, row.Floor.P99), us(row.ColdFloor.P50), ratio(row.Lat.P50, row.ColdFloor.P50),
			row.Misses, row.Abandoned, Cores(row.Steal), paths)
		if row.MaxDiff > row.Bound {
			return fmt.Errorf("bench: tick %s: max |u - uplain| = %g exceeds the bound %g", c.Name, row.MaxDiff, row.Bound)
		}
	}
	return nil
}

// DealerCases are the pendulum and a d = 100 controller (n = 99, m = p = 1:
// Φ is 100 x 100, the largest Fig. 5 point).
func DealerCases(pendulum mpc.ControllerSpec) []DealerCase {
	return []DealerCase{{Name: "pendulum", Controller: pendulum}, {Name: "d100", Controller: RandomController(99, 1, 1)}}
}

func runDealerSection(ctx context.Context, url string, plan Plan, cs mpc.ControllerSpec, log *slog.Logger, rep *Report, pr func(string, ...any)) error {
	rows, err := RunDealer(ctx, DealerOptions{URL: url, Items: plan.DealerItems, Log: log}, DealerCases(cs))
	rep.Dealer = rows
	for _, r := range rows {
		pr("  %-8s %-8s compress=%-5v replicas=%d  %8.0f items/s  %6d B/tick payload  %8.1f B/item in the stream",
			r.Case, r.Variant, r.Compress, r.Replicas, r.Rate, r.PayloadBytes, r.StreamBytes)
	}
	return err
}

func runScaleSection(ctx context.Context, url string, ns *server.Server, plan Plan, cs mpc.ControllerSpec, profileDir string, log *slog.Logger, rep *Report, pr func(string, ...any)) error {
	if err := idleCheck(ctx, plan.IdleCheck, "before", rep, pr); err != nil {
		return err
	}
	if err := runScaleSearches(ctx, url, ns, plan, cs, profileDir, log, rep, pr); err != nil {
		return err
	}
	return idleCheck(ctx, plan.IdleCheck, "after", rep, pr)
}

// idleCheck measures the machine's stalls for d with nothing of the bench
// running (d <= 0: nothing), after collecting what the sections before it
// left behind (quiesce).
func idleCheck(ctx context.Context, d time.Duration, when string, rep *Report, pr func(string, ...any)) error {
	if d <= 0 {
		return nil
	}
	quiesce()
	cpu := startCPUMeter()
	m := startStallMonitor()
	t0 := time.Now()
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	row := IdleRow{When: when, Took: time.Since(t0), Result: m.End()}
	row.CPU, _ = cpu.cores(row.Took)
	if err := ctx.Err(); err != nil {
		return err
	}
	rep.Idle = append(rep.Idle, row)
	pr("  machine idle (%s the scale search): %s (%d wake-ups; the bench process meanwhile %.3f cores)", when, idleSummary([]IdleRow{row}), row.Wakeups, row.CPU)
	return nil
}

// searchIndex is the index of a scale search in the Report's per-search
// arrays: 1 with persistence, 0 without.
func searchIndex(persist bool) int {
	if persist {
		return 1
	}
	return 0
}

// runScaleSearches runs the scale search with persistence and without, then
// the floor alone.
func runScaleSearches(ctx context.Context, url string, ns *server.Server, plan Plan, cs mpc.ControllerSpec, profileDir string, log *slog.Logger, rep *Report, pr func(string, ...any)) error {
	// The main search runs the parties as cmd/party does by default
	// (DUET_PERSIST=true: the state share is persisted every tick); the
	// second one without persistence, to show what it costs.
	var inProc nats.InProcessConnProvider // nil (not a nil *server.Server): over TCP
	if plan.ScaleInProcess && ns != nil {
		inProc = ns
	}
	for _, persist := range []bool{true, false} {
		loops := plan.ScaleLoops
		if !persist {
			loops = plan.ScaleNoPersistLoops
		}
		_, err := RunScale(ctx, ScaleOptions{URL: url, Loops: loops, Duration: plan.ScaleDur, P99Limit: rep.ScaleLimit, Budget: plan.ScaleBudget, PeerBatch: plan.PeerBatch, Prefetch: plan.Prefetch, WriteCoalesce: plan.WriteCoalesce, ItemsPerMsg: plan.ItemsPerMsg, StateFileStore: plan.StateFileStore,
			Repeat: plan.ScaleRepeat, PartyBin: plan.PartyBin, Controller: cs, Variant: plan.ScaleVariant, TwoHop: plan.ScaleTwoHop, LiveDealers: plan.ScaleLiveDealers, Compress: true, NoPersist: !persist, ProfileDir: profileDir, Log: log, ServerOutside: rep.Server != Embedded, Server: ns, InProcess: inProc, ColdHeap: plan.ScaleColdHeap,
			OnBudget: func(next int) { rep.ScaleBudgetStop[searchIndex(persist)] = next },
			OnStep: func(r ScaleRow) {
				rep.Scale = append(rep.Scale, r)
				if plan.ScaleRepeat > 1 {
					pr("  step %d of %d at %d loops:", r.Try, plan.ScaleRepeat, r.Loops)
				}
				pr("  %5d loops  persist=%-5v  %7d ticks  p50 %7.1fµs  p99 %8.1fµs  misses %d  wrong %d  stalls %d (worst %v)  | floor p50 %6.1fµs p99 %8.1fµs misses %d stalls %d (worst %v) cpu %.2f stolen %s | parties: %d abandoned%s, %d without item, %d refused%s | cpu %.2f cores, stolen %s, %d GCs (%.0f ms CPU, %.0f ms of it assists), %.1f KB allocated/tick, %.0f page faults/s (%.0f MB faulted in before), %.2f peer messages/tick for %.2f (%.2f held), broker messages %s in + %s out/tick, run-queue p99 %.0fµs (floor %.0fµs), %s syscalls/tick (floor %s) | cores by role: parties %s + %s (%s µs/tick for the pair), broker %s, harness %s, collector %s (sweeping %s), other %s (floor: relays %s, broker %s, harness %s)  ok %v (set-up %v)",
					r.Loops, r.Persist, r.Ticks, us(r.P50), us(r.P99), r.Misses, r.Wrong, r.Stalls, r.StallMax.Round(100*time.Microsecond),
					us(r.FloorP50), us(r.FloorP99), r.FloorMisses, r.FloorStalls, r.FloorStallMax.Round(100*time.Microsecond), r.FloorCPU, Cores(r.FloorSteal), r.PartyMisses, parenthesized(r.AbandonedBy()), r.NoItem, r.Rejected(), parenthesized(r.RejectsBy()),
					r.CPU, Cores(r.Steal), r.GCs, float64(r.GCCPU)/1e6, float64(r.GCAssist)/1e6, r.AllocPerTick/1024, r.FaultsPerSec, r.PrefaultMB, r.PeerMsgsPerTick, r.PeerEnvsPerTick, r.PeerHeldPerTick, Cores(r.BrokerInPerTick), Cores(r.BrokerOutPerTick),
					us(r.SchedP99), us(r.FloorSchedP99), Cores(r.SyscallsPerTick), Cores(r.FloorSyscallsPerTick),
					Cores(r.Roles.Party[0]), Cores(r.Roles.Party[1]), Cores(r.Roles.PairPerTick(r.Loops, r.Period)), Cores(r.Roles.Broker), Cores(r.Roles.Harness), Cores(r.Roles.Collector), Cores(r.Roles.Sweep), Cores(r.Roles.Other),
					Cores(r.FloorRoles.Pair()), Cores(r.FloorRoles.Broker), Cores(r.FloorRoles.Harness),
					r.OK, r.Setup.Round(100*time.Millisecond))
				if r.TwoHop {
					pr("         two hops: %d of %d measured ticks sent masked, %d fallbacks to three hops (both parties' counts added)", r.TwoHopTicks, r.Ticks, r.FallbackTicks)
				}
				if r.PartyProcs {
					pr("         party processes: %.2f KB allocated/tick, %d GCs (both processes' heaps added)", r.PartyAllocPerTick/1024, r.PartyGCs)
				}
			}})
		if err != nil {
			rep.ScaleCut[searchIndex(persist)] = true
			return err
		}
	}
	if len(plan.ScaleFloorLoops) == 0 {
		return nil
	}
	rows, err := RunScaleFloor(ctx, url, inProc, cs, plan.ScaleVariant, plan.ScaleFloorLoops, plan.ScaleDur)
	for _, r := range rows {
		rep.ScaleFloor = append(rep.ScaleFloor, r)
		pr("  floor alone: %5d loops  %7d ticks  p50 %7.1fµs  p99 %8.1fµs  misses %d  cpu %.2f cores  stolen %s  run-queue p99 %.0fµs  %s syscalls/tick", r.Loops, r.Ticks, us(r.P50), us(r.P99), r.Misses, r.CPU, Cores(r.Steal),
			us(r.SchedP99), Cores(r.SyscallsPerTick))
	}
	return err
}

// parenthesized is " (s)", or "" for an empty s.
func parenthesized(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
