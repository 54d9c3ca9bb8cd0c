package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/duet-mpc/duet/examples"
	"github.com/duet-mpc/duet/internal/bench"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

func init() {
	register("bench", "measure Fig. 5, tick latency, dealer throughput and loops per party pair (CSV + PNG)", runBench)
}

// scaleOnlyFlags are the bench flags that only the scale section uses, and
// partyFlags those that only the tick and scale sections use (the parties').
var (
	scaleOnlyFlags = []string{"loops", "items-per-msg", "repeat", "mask", "two-hop", "cold-heap", "in-process", "live-dealers", "step-duration"}
	partyFlags     = []string{"peer-batch", "prefetch", "write-coalesce", "state-file-store", "party-bin"}
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "a short run: fewer repetitions, ticks and sizes, a limited scale search")
	url := fs.String("nats", "", "NATS server URL (default: an embedded server)")
	out := fs.String("out", "", "directory for the CSV files, plots and profiles (required)")
	only := fs.String("only", "", "comma-separated sections to run: "+strings.Join(bench.AllSections, ","))
	profile := fs.Bool("pprof", false, "write CPU, block, mutex, allocation and goroutine profiles of each section, and every measured tick of the scale search, into DIR/pprof/")
	examplesDir := fs.String("examples", examples.QubeDir, "directory of the pendulum's controller.json and plant.json; the default is read from the copy built into duet when this directory has none")
	verbose := fs.Bool("v", false, "log service events to stderr")
	loops := fs.String("loops", "", "comma-separated loop counts for the scale search, tried in order (default: the plan's, 50 up to 1500)")
	peerBatch := fs.Int("peer-batch", 0, "the parties' DUET_PEER_BATCH in the tick and scale sections (default: the service default; 1: no batching)")
	prefetch := fs.Int("prefetch", 0, "the parties' DUET_PREFETCH in the tick and scale sections, offline items per pull and loop (default: the service default, 64)")
	coalesceFlag := fs.String("write-coalesce", "", "the parties' DUET_WRITE_COALESCE in the tick and scale sections, a duration up to 10ms (default: the service default; 0: off)")
	stateFile := fs.Bool("state-file-store", false, "persist the parties' state to JetStream file storage in the tick and scale sections (DUET_STATE_FILE_STORE=true, the services' default; default: memory storage, as the README's results)")
	perMsg := fs.Int("items-per-msg", 0, "the sensors' DUET_ITEMS_PER_MSG in the scale section (default: the service default)")
	repeat := fs.Int("repeat", 0, "steps of the scale search at each loop count; a count holds only if every one of them held (default 1)")
	mask := fs.String("mask", "per-tick", "the sensors' DUET_MASK in the scale section: per-tick (the services' default) or fixed")
	twoHop := fs.Bool("two-hop", false, "run the scale section's loops with the two-hop tick (DUET_TWO_HOP, on in the shipped deployments; default: three hops, the services' default)")
	coldHeap := fs.Bool("cold-heap", false, "run each scale step on the heap its set-up leaves, which then faults in its growth a page at a time during the floor and the loops, as the bench did before the forty-third session; default: the step's heap headroom is faulted in after the set-up, as a process that has served its load for a while has it")
	inProcess := fs.Bool("in-process", false, "connect the scale section's loops and floors to the embedded NATS server in process (in-memory pipes), not over loopback TCP: what the stack costs without the kernel's loopback; not with --nats or --party-bin")
	partyBin := fs.String("party-bin", "", "run the two parties of the tick and scale sections as this party binary (a build of cmd/party), each in its own process, instead of inside the bench")
	liveDealers := fs.Duration("live-dealers", 0, "keep two dealer replicas checking the scale steps' queues during the measurement, as deployed dealers do, with this DUET_POLL_MAX (DUET_POLL 50ms; 50ms: a check every 50 ms, as before DUET_POLL_MAX existed); default: the dealers stop once the queues are full")
	stepDur := fs.Duration("step-duration", 0, "the measured window of each scale step and of each count of the floor alone, 1s..10m (default: 6s, 2s with --quick)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	if *out == "" {
		return fmt.Errorf("%w: --out DIR is required", ErrUsage)
	}
	var sections []string
	if *only != "" {
		for _, sec := range strings.Split(*only, ",") {
			sec = strings.TrimSpace(sec)
			if slices.Contains(sections, sec) {
				return fmt.Errorf("%w: --only %q: section %q named twice", ErrUsage, *only, sec)
			}
			if !slices.Contains(bench.AllSections, sec) {
				return fmt.Errorf("%w: --only %q: unknown section %q (want some of %s)", ErrUsage, *only, sec, strings.Join(bench.AllSections, ","))
			}
			sections = append(sections, sec)
		}
	}
	// A flag of the scale section alone, with --only leaving that section
	// out, or of the parties, with --only leaving out both sections that
	// run them, would change nothing: refused rather than ignored.
	unusedFlags := func(names []string) string {
		var unused []string
		fs.Visit(func(f *flag.Flag) {
			if slices.Contains(names, f.Name) {
				unused = append(unused, "--"+f.Name)
			}
		})
		return strings.Join(unused, ", ")
	}
	if len(sections) > 0 && !slices.Contains(sections, bench.SectionScale) {
		if unused := unusedFlags(scaleOnlyFlags); unused != "" {
			return fmt.Errorf("%w: %s only affect the scale section, which --only %q leaves out", ErrUsage, unused, *only)
		}
		if unused := unusedFlags(partyFlags); unused != "" && !slices.Contains(sections, bench.SectionTick) {
			return fmt.Errorf("%w: %s only affect the tick and scale sections, which --only %q leaves out", ErrUsage, unused, *only)
		}
	}
	if *peerBatch < 0 || *peerBatch > codec.MaxBatchEnvelopes {
		return fmt.Errorf("%w: --peer-batch %d: want 1..%d (0: the default)", ErrUsage, *peerBatch, codec.MaxBatchEnvelopes)
	}
	if *prefetch < 0 || *prefetch > party.MaxPrefetch {
		return fmt.Errorf("%w: --prefetch %d: want 1..%d (0: the default)", ErrUsage, *prefetch, party.MaxPrefetch)
	}
	if *perMsg < 0 || *perMsg > codec.MaxItemsPerMsg {
		return fmt.Errorf("%w: --items-per-msg %d: want 1..%d (0: the default)", ErrUsage, *perMsg, codec.MaxItemsPerMsg)
	}
	if *repeat < 0 || *repeat > maxRepeat {
		return fmt.Errorf("%w: --repeat %d: want 1..%d (0: one)", ErrUsage, *repeat, maxRepeat)
	}
	if *stepDur != 0 && (*stepDur < time.Second || *stepDur > maxStepDuration) {
		return fmt.Errorf("%w: --step-duration %v: want 1s..%v", ErrUsage, *stepDur, maxStepDuration)
	}
	if *liveDealers != 0 && (*liveDealers < 50*time.Millisecond || *liveDealers > time.Minute) {
		return fmt.Errorf("%w: --live-dealers %v: want 50ms..1m (DUET_POLL_MAX, at least the dealers' DUET_POLL of 50ms)", ErrUsage, *liveDealers)
	}
	if *inProcess && (*url != "" || *partyBin != "") {
		return fmt.Errorf("%w: --in-process needs the embedded NATS server and the parties inside the bench: not with --nats or --party-bin", ErrUsage)
	}
	if *partyBin != "" {
		abs, err := executablePath(*partyBin)
		if err != nil {
			return fmt.Errorf("%w: --party-bin: %w", ErrUsage, err)
		}
		*partyBin = abs
	}
	variant, err := mpc.ParseVariant(*mask)
	if err != nil {
		return fmt.Errorf("%w: --mask: %w", ErrUsage, err)
	}
	var coalesce time.Duration // 0: the default
	if *coalesceFlag != "" {
		d, err := time.ParseDuration(*coalesceFlag)
		if err != nil || d < 0 || d > party.MaxWriteCoalesce {
			return fmt.Errorf("%w: --write-coalesce %q: want a duration from 0 (off) to %v", ErrUsage, *coalesceFlag, party.MaxWriteCoalesce)
		}
		if coalesce = d; d == 0 {
			coalesce = -1 // off
		}
	}
	// The plan Run would pick (full or quick), with the flags' settings.
	plan := bench.PlanFor(*quick)
	if *loops != "" {
		ns, err := parseCounts(*loops)
		if err != nil {
			return fmt.Errorf("%w: --loops: %w", ErrUsage, err)
		}
		if n := slices.Max(ns); n > maxScaleLoops {
			return fmt.Errorf("%w: --loops: %d loops, want at most %d (each loop holds two streams' worth of items and consumers in the one process)", ErrUsage, n, maxScaleLoops)
		}
		plan.ScaleLoops, plan.ScaleNoPersistLoops, plan.ScaleBudget = ns, ns, 0
	}
	plan.PeerBatch, plan.ItemsPerMsg, plan.WriteCoalesce, plan.StateFileStore = *peerBatch, *perMsg, coalesce, *stateFile
	plan.Prefetch = *prefetch
	plan.ScaleVariant, plan.ScaleRepeat, plan.PartyBin, plan.ScaleTwoHop = variant, *repeat, *partyBin, *twoHop
	plan.ScaleLiveDealers, plan.ScaleInProcess, plan.ScaleColdHeap = *liveDealers, *inProcess, *coldHeap
	if *stepDur != 0 {
		plan.ScaleDur = *stepDur
	}
	lvl := slog.LevelError + 4 // silent: the services log expected rejections at set-up and shutdown
	if *verbose {
		lvl = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	rep, err := bench.Run(ctx, bench.Options{Quick: *quick, URL: *url, Out: *out, Sections: sections, Examples: *examplesDir,
		Profile: *profile, Plan: &plan, Log: log, Progress: stderr})
	if rep != nil {
		// The summary on stdout and, beside the CSV files, as summary.txt.
		var sum bytes.Buffer
		printSummary(&sum, rep, *out)
		stdout.Write(sum.Bytes())
		if werr := writeSummary(*out, sum.Bytes()); werr != nil {
			fmt.Fprintf(stderr, "bench: the summary was not written into %s: %v\n", *out, werr)
			if err == nil {
				err = werr
			}
		}
	}
	if err != nil && ctx.Err() != nil {
		// Ctrl-C or SIGTERM: Run wrote what finished; say so rather than
		// only "context canceled".
		return fmt.Errorf("interrupted (%w): the summary above and the files in %s cover what finished before", err, *out)
	}
	return err
}

// writeSummary writes the summary table into dir as summary.txt, when dir
// is there (a run that failed before it made dir writes none).
func writeSummary(dir string, sum []byte) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "summary.txt"), sum, 0o644)
}

// executablePath is path made absolute, or why it is not a file this user
// can execute. Absolute, because a bare name would be looked up in PATH when
// the bench starts it, which may not be the file checked here.
func executablePath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable", path)
	}
	return abs, nil
}

// maxRepeat bounds duet bench --repeat: each step takes 20-30 s here.
const maxRepeat = 20

// maxScaleLoops bounds a count of duet bench --loops: the default search
// stops at 1,500.
const maxScaleLoops = 5000

// maxStepDuration bounds duet bench --step-duration: a longer window shows
// how a step rides out a disturbance (the README's recovery measurement),
// and each step keeps every measured tick's latency in memory.
const maxStepDuration = 10 * time.Minute

func printSummary(w io.Writer, rep *bench.Report, out string) {
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e3) }
	x := func(a, b time.Duration) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", float64(a)/float64(b))
	}
	mode := "full"
	if rep.Quick {
		mode = "quick"
	}
	parties := ""
	if rep.PartyBin != "" {
		parties = ", the parties as processes of " + rep.PartyBin + " (tick and scale sections)"
	}
	hops := ""
	if rep.ScaleTwoHop {
		hops = " and the two-hop tick"
	}
	if rep.ScaleInProcess {
		hops += ", connected to the embedded server in process (scale section)"
	}
	if rep.ScaleColdHeap {
		hops += ", each scale step on a cold heap"
	}
	if rep.ScaleLiveDealers > 0 {
		hops += fmt.Sprintf(", dealers checking their queues during the steps (DUET_POLL_MAX=%v)", rep.ScaleLiveDealers)
	}
	if rep.Prefetch != 0 {
		parties += fmt.Sprintf(", the parties prefetching %d offline items per pull and loop (tick and scale sections)", rep.Prefetch)
	}
	fmt.Fprintf(w, "duet bench (%s, NATS %s, state persisted to %s, scale loops with the %s mask%s%s)\n", mode, rep.Server, stateStore(rep.StateFileStore), rep.ScaleVariant, hops, parties)
	if rep.Machine != nil {
		fmt.Fprintf(w, "this machine: %s\n", rep.Machine)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(rep.Fig5) > 0 {
		fmt.Fprintln(w, "\nFig. 5: round trip at the client (µs); floor: same messages, no computation or encryption")
		fmt.Fprintln(tw, "series\td\treps\tmin\tmean\tmax\tci99\tp50\tfloor p50\tp50/floor\tbytes/party\t")
		for _, r := range rep.Fig5 {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s–%s\t%s\t%s\t%s\t%d\t\n", r.Series.Name(), r.D, r.Lat.N, us(r.Lat.Min), us(r.Lat.Mean), us(r.Lat.Max),
				us(r.Lat.CILo), us(r.Lat.CIHi), us(r.Lat.P50), us(r.Floor.P50), x(r.Lat.P50, r.Floor.P50), r.BytesPerParty())
		}
		tw.Flush()
	}
	if len(rep.Tick) > 0 {
		fmt.Fprintln(w, "\nController tick through the real services (µs, sensor publish to actuator reconstruction)")
		fmt.Fprintln(tw, "case\tn\tvariant\tpersist\tticks\tmisses\tabandoned\tp50\tp99\tfloor p50\tfloor p99\tp50/floor\tp99/floor\t")
		for _, r := range rep.Tick {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Case, r.N, r.Variant, r.Persist, r.Lat.N+r.Misses, r.Misses, r.Abandoned,
				us(r.Lat.P50), us(r.Lat.P99), us(r.Floor.P50), us(r.Floor.P99), x(r.Lat.P50, r.Floor.P50), x(r.Lat.P99, r.Floor.P99))
		}
		tw.Flush()
	}
	if len(rep.Dealer) > 0 {
		fmt.Fprintln(w, "\nDealer throughput (real dealer replicas into a real offline queue)")
		fmt.Fprintln(tw, "case\tvariant\tcompress\titems/msg\treplicas\titems/s\tpayload B/tick\tstream B/item\t")
		for _, r := range rep.Dealer {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%d\t%.0f\t%d\t%.0f\t\n", r.Case, r.Variant, r.Compress, r.PerMsg, r.Replicas, r.Rate, r.PayloadBytes, r.StreamBytes)
		}
		tw.Flush()
	}
	if len(rep.Scale) > 0 {
		fmt.Fprintf(w, "\nConcurrent 25 Hz loops on one P0/P1 pair (ok: p99 < %v, no misses); floor: same loops, no computation or encryption; parties and server: their share of the cpu cores (the floor's relays and server in parentheses)\n", rep.ScaleLimit)
		fmt.Fprintln(tw, "loops\ttry\tpersist\tticks\tp50 µs\tp99 µs\tmisses\twrong\tfloor p50\tfloor p99\tfloor misses\tfloor stalls (worst ms)\tcpu cores\tparties (floor)\tserver (floor)\tstolen\trun-queue p99 µs\tsyscalls/tick\tstalls (worst ms)\trss MB\tok\t")
		for _, r := range rep.Scale {
			fmt.Fprintf(tw, "%d\t%d\t%v\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d (%.1f)\t%.2f\t%s (%s)\t%s (%s)\t%s\t%s\t%s\t%d (%.1f)\t%s\t%v\t\n", r.Loops, max(r.Try, 1), r.Persist, r.Ticks, us(r.P50), us(r.P99), r.Misses, r.Wrong,
				us(r.FloorP50), us(r.FloorP99), r.FloorMisses, r.FloorStalls, float64(r.FloorStallMax)/1e6, r.CPU,
				bench.Cores(r.Roles.Pair()), bench.Cores(r.FloorRoles.Pair()), bench.Cores(r.Roles.Broker), bench.Cores(r.FloorRoles.Broker),
				bench.Cores(r.Steal), us(r.SchedP99), bench.Cores(r.SyscallsPerTick), r.Stalls, float64(r.StallMax)/1e6, bench.Megabytes(r.RSS), r.OK)
		}
		tw.Flush()
	}
	if len(rep.ScaleFloor) > 0 {
		fmt.Fprintln(w, "\nThe floor alone (bare messaging, same loops and message sizes, no parties): what this machine's NATS path allows")
		fmt.Fprintln(tw, "loops\tticks\tp50 µs\tp99 µs\tmisses\tcpu cores\tstolen\trun-queue p99 µs\tsyscalls/tick\tstalls (worst ms)\trss MB\t")
		for _, r := range rep.ScaleFloor {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%.2f\t%s\t%s\t%s\t%d (%.1f)\t%s\t\n", r.Loops, r.Ticks, us(r.P50), us(r.P99), r.Misses, r.CPU, bench.Cores(r.Steal),
				us(r.SchedP99), bench.Cores(r.SyscallsPerTick), r.Stalls, float64(r.StallMax)/1e6, bench.Megabytes(r.RSS))
		}
		tw.Flush()
	}
	if len(rep.Idle) > 0 {
		fmt.Fprintf(w, "\nThis machine with nothing of the bench running: a 1 ms sleeper's wake-ups more than %v late (a freeze past a tick's 30 ms deadline misses the ticks in flight, whatever runs)\n", bench.StallThreshold)
		fmt.Fprintln(tw, "when\tseconds\twake-ups\tstalls\tworst ms\tbench cpu cores\t")
		for _, r := range rep.Idle {
			fmt.Fprintf(tw, "%s the scale search\t%.1f\t%d\t%d\t%.1f\t%.3f\t\n", r.When, r.Took.Seconds(), r.Wakeups, r.Count, float64(r.Worst)/1e6, r.CPU)
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\nTargets")
	for _, t := range rep.Targets() {
		mark := "MET   "
		switch {
		case !t.Measured:
			mark, t.Got = "n/a   ", "not measured in this run"
		case t.Undecided:
			mark = "OPEN  " // the search stopped below the target (Got says why)
		case !t.Met:
			mark = "MISSED"
		}
		fmt.Fprintf(w, "  %s %s: %s\n", mark, t.Name, t.Got)
	}
	fmt.Fprintf(w, "\nwrote CSV files, plots and this summary (summary.txt) to %s\n", out)
}

// parseCounts parses "50,100,200": positive integers.
func parseCounts(s string) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// stateStore names where the bench persisted the parties' state.
func stateStore(file bool) string {
	if file {
		return "JetStream file storage"
	}
	return "JetStream memory storage"
}
