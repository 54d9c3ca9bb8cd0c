package bench

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// CSV headers. protocol1.csv, protocol2.csv, tick.csv, dealer.csv and
// scale.csv are the files `duet bench` promises; the *_detail.csv files add
// what the summary table prints (floors, ratios, message sizes, misses).
var (
	Protocol1Header   = []string{"variant", "d", "reps", "min_us", "mean_us", "max_us", "ci99_lo_us", "ci99_hi_us", "bytes_per_party"}
	Protocol2Header   = Protocol1Header[1:]
	Fig5FloorHeader   = []string{"series", "d", "p50_us", "p99_us", "mean_us", "floor_p50_us", "floor_p99_us", "floor_mean_us", "ratio_p50", "ratio_mean", "measure_bytes", "exchange_bytes", "output_bytes", "bytes_p0", "bytes_p1"}
	TickHeader        = []string{"case", "p50_us", "p99_us", "floor_p50_us", "floor_p99_us"}
	TickDetailHeader  = []string{"case", "n", "m", "p", "modulus", "variant", "persist", "ticks", "misses", "p50_us", "p99_us", "floor_p50_us", "floor_p99_us", "ratio_p50", "ratio_p99", "measure_bytes", "exchange_bytes", "output_bytes", "max_du", "du_bound", "abandoned", "queue_after", "steal_cores", "state_file_store", "two_hop_ticks", "fallback_ticks", "cold_floor_p50_us", "cold_floor_p99_us", "party_procs"}
	DealerHeader      = []string{"case", "variant", "compress", "replicas", "items_per_msg", "items", "seconds", "items_per_s", "payload_bytes_per_tick", "stream_bytes_per_item"}
	ScaleHeader       = []string{"loops", "p50_us", "p99_us", "misses", "ok"}
	MachineHeader     = []string{"matvec_us", "matvec_runs", "rtts", "rtt_min_us", "rtt_p50_us", "rtt_p99_us"}
	IdleHeader        = []string{"when", "seconds", "wakeups", "stalls_over_" + StallThreshold.String(), "worst_ms", "process_cores"}
	ScaleFloorHeader  = []string{"loops", "ticks", "misses", "p50_us", "p99_us", "cpu_cores", "steal_cores", "sched_p99_us", "syscalls_per_tick", "stalls", "stall_max_ms", "rss_mb"}
	ScaleDetailHeader = []string{"loops", "persist", "ticks", "p50_us", "p99_us", "misses", "wrong", "ok", "floor_ticks", "floor_p50_us", "floor_p99_us", "floor_misses", "stalls", "stall_max_ms", "floor_stalls", "floor_stall_max_ms", "cpu_cores", "setup_s", "party_misses", "party_no_item", "floor_cpu_cores", "gc_cycles", "alloc_kb_per_tick", "peer_msgs_per_tick", "peer_envelopes_per_tick", "party_abandoned_by", "steal_cores", "floor_steal_cores", "party_held", "write_coalesce_us", "sched_p99_us", "floor_sched_p99_us", "syscalls_per_tick", "floor_syscalls_per_tick", "gc_cpu_ms", "gc_assist_ms", "party0_cores", "party1_cores", "broker_cores", "harness_cores", "collector_cores", "other_cores", "pair_cpu_us_per_tick", "floor_pair_cores", "floor_broker_cores", "floor_harness_cores", "state_file_store", "rss_mb", "variant", "try", "party_procs", "two_hop", "two_hop_ticks", "fallback_ticks", "party_rejects_by", "party_alloc_kb_per_tick", "party_gc_cycles", "prefetch", "collector_sweep_cores", "broker_msgs_in_per_tick", "broker_msgs_out_per_tick", "live_dealers_poll_max_ms", "peer_held_per_tick", "in_process", "prefault_mb", "page_faults_per_s"}
)

func writeCSV(dir, name string, header []string, rows [][]string) error {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(header)
	_ = w.WriteAll(rows) // WriteAll flushes
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("bench: writing %s: %w", name, err)
	}
	return f.Close()
}

func ff(x float64, prec int) string { return strconv.FormatFloat(x, 'f', prec, 64) }

// fnan is ff, or an empty cell for NaN (not measured).
func fnan(x float64, prec int) string {
	if math.IsNaN(x) {
		return ""
	}
	return ff(x, prec)
}
func fi(x int) string  { return strconv.Itoa(x) }
func fb(x bool) string { return strconv.FormatBool(x) }

func statCols(s Stats) []string {
	return []string{fi(s.N), ff(us(s.Min), 1), ff(us(s.Mean), 1), ff(us(s.Max), 1), ff(us(s.CILo), 1), ff(us(s.CIHi), 1)}
}

// WriteCSVs writes every CSV file of the report into dir.
func (rep *Report) WriteCSVs(dir string) error {
	var p1, p2, fl [][]string
	for _, r := range rep.Fig5 {
		cols := append(append([]string{fi(r.D)}, statCols(r.Lat)...), fi(r.BytesPerParty()))
		if r.Series.Protocol == 1 {
			p1 = append(p1, append([]string{r.Series.Variant.String()}, cols...))
		} else {
			p2 = append(p2, cols)
		}
		fl = append(fl, []string{r.Series.Name(), fi(r.D), ff(us(r.Lat.P50), 1), ff(us(r.Lat.P99), 1), ff(us(r.Lat.Mean), 1),
			ff(us(r.Floor.P50), 1), ff(us(r.Floor.P99), 1), ff(us(r.Floor.Mean), 1),
			ff(ratio(r.Lat.P50, r.Floor.P50), 2), ff(ratio(r.Lat.Mean, r.Floor.Mean), 2),
			fi(r.Sizes.Measure), fi(r.Sizes.Exchange), fi(r.Sizes.Output), fi(r.BytesP0), fi(r.BytesP1)})
	}
	var tk, td [][]string
	for _, r := range rep.Tick {
		tk = append(tk, []string{r.Case, ff(us(r.Lat.P50), 1), ff(us(r.Lat.P99), 1), ff(us(r.Floor.P50), 1), ff(us(r.Floor.P99), 1)})
		td = append(td, []string{r.Case, fi(r.N), fi(r.M), fi(r.P), r.Modulus, r.Variant.String(), fb(r.Persist), fi(r.Lat.N + r.Misses), fi(r.Misses),
			ff(us(r.Lat.P50), 1), ff(us(r.Lat.P99), 1), ff(us(r.Floor.P50), 1), ff(us(r.Floor.P99), 1),
			ff(ratio(r.Lat.P50, r.Floor.P50), 2), ff(ratio(r.Lat.P99, r.Floor.P99), 2),
			fi(r.Sizes.Measure), fi(r.Sizes.Exchange), fi(r.Sizes.Output), ff(r.MaxDiff, 6), ff(r.Bound, 6), fi(r.Abandoned), fi(r.QueueAfter), fnan(r.Steal, 2), fb(r.StateFileStore), fi(r.TwoHopTicks), fi(r.FallbackTicks),
			ff(us(r.ColdFloor.P50), 1), ff(us(r.ColdFloor.P99), 1), fb(r.PartyProcs)})
	}
	var dl [][]string
	for _, r := range rep.Dealer {
		dl = append(dl, []string{r.Case, r.Variant.String(), fb(r.Compress), fi(r.Replicas), fi(r.PerMsg), fi(r.Items), ff(r.Seconds, 4), ff(r.Rate, 0),
			fi(r.PayloadBytes), ff(r.StreamBytes, 1)})
	}
	var sc, sd [][]string
	for _, r := range rep.Scale {
		if r.Persist { // scale.csv is the main search (default configuration)
			sc = append(sc, []string{fi(r.Loops), ff(us(r.P50), 1), ff(us(r.P99), 1), fi(r.Misses), fb(r.OK)})
		}
		sd = append(sd, []string{fi(r.Loops), fb(r.Persist), fi(r.Ticks), ff(us(r.P50), 1), ff(us(r.P99), 1), fi(r.Misses), fi(r.Wrong), fb(r.OK),
			fi(r.FloorTicks), ff(us(r.FloorP50), 1), ff(us(r.FloorP99), 1), fi(r.FloorMisses),
			fi(r.Stalls), ff(float64(r.StallMax)/1e6, 1), fi(r.FloorStalls), ff(float64(r.FloorStallMax)/1e6, 1), ff(r.CPU, 2), ff(r.Setup.Seconds(), 1), fi(r.PartyMisses), fi(r.NoItem), ff(r.FloorCPU, 2), fi(r.GCs), ff(r.AllocPerTick/1024, 2), ff(r.PeerMsgsPerTick, 2), ff(r.PeerEnvsPerTick, 2), r.AbandonedBy(), fnan(r.Steal, 2), fnan(r.FloorSteal, 2), fi(r.PartyHeld), ff(float64(r.WriteCoalesce)/1e3, 0),
			ff(us(r.SchedP99), 1), ff(us(r.FloorSchedP99), 1), fnan(r.SyscallsPerTick, 2), fnan(r.FloorSyscallsPerTick, 2),
			ff(float64(r.GCCPU)/1e6, 1), ff(float64(r.GCAssist)/1e6, 1),
			fnan(r.Roles.Party[0], 3), fnan(r.Roles.Party[1], 3), fnan(r.Roles.Broker, 3), fnan(r.Roles.Harness, 3), fnan(r.Roles.Collector, 3), fnan(r.Roles.Other, 3),
			fnan(r.Roles.PairPerTick(r.Loops, r.Period), 1), fnan(r.FloorRoles.Pair(), 3), fnan(r.FloorRoles.Broker, 3), fnan(r.FloorRoles.Harness, 3), fb(r.StateFileStore), fnan(r.RSS, 0), r.Variant.String(), fi(max(r.Try, 1)), fb(r.PartyProcs), fb(r.TwoHop), fi(r.TwoHopTicks), fi(r.FallbackTicks), r.RejectsBy(),
			fnan(r.PartyAllocPerTick/1024, 2), fnan(r.partyGCs(), 0), fi(r.Prefetch), fnan(r.Roles.Sweep, 3), fnan(r.BrokerInPerTick, 2), fnan(r.BrokerOutPerTick, 2), fi(int(r.LiveDealers.Milliseconds())), ff(r.PeerHeldPerTick, 2), fb(r.InProcess), ff(r.PrefaultMB, 0), ff(r.FaultsPerSec, 0)})
	}
	var sf [][]string
	for _, r := range rep.ScaleFloor {
		sf = append(sf, []string{fi(r.Loops), fi(r.Ticks), fi(r.Misses), ff(us(r.P50), 1), ff(us(r.P99), 1), ff(r.CPU, 2), fnan(r.Steal, 2), ff(us(r.SchedP99), 1), fnan(r.SyscallsPerTick, 2),
			fi(r.Stalls), ff(float64(r.StallMax)/1e6, 1), fnan(r.RSS, 0)})
	}
	var il [][]string
	for _, r := range rep.Idle {
		il = append(il, []string{r.When, ff(r.Took.Seconds(), 1), fi(r.Wakeups), fi(r.Count), ff(float64(r.Worst)/1e6, 1), ff(r.CPU, 3)})
	}
	var mc [][]string
	if m := rep.Machine; m != nil {
		mc = append(mc, []string{ff(us(m.MatVec), 2), fi(m.MatVecRuns), fi(m.RTTs), ff(us(m.RTTMin), 1), ff(us(m.RTTP50), 1), ff(us(m.RTTP99), 1)})
	}
	files := []struct {
		name   string
		header []string
		rows   [][]string
		have   bool
	}{
		{"protocol1.csv", Protocol1Header, p1, len(rep.Fig5) > 0},
		{"protocol2.csv", Protocol2Header, p2, len(rep.Fig5) > 0},
		{"fig5_floor.csv", Fig5FloorHeader, fl, len(rep.Fig5) > 0},
		{"tick.csv", TickHeader, tk, len(rep.Tick) > 0},
		{"tick_detail.csv", TickDetailHeader, td, len(rep.Tick) > 0},
		{"dealer.csv", DealerHeader, dl, len(rep.Dealer) > 0},
		{"scale.csv", ScaleHeader, sc, len(rep.Scale) > 0},
		{"scale_detail.csv", ScaleDetailHeader, sd, len(rep.Scale) > 0},
		{"scale_floor.csv", ScaleFloorHeader, sf, len(rep.ScaleFloor) > 0},
		{"machine_idle.csv", IdleHeader, il, len(rep.Idle) > 0},
		{"machine.csv", MachineHeader, mc, rep.Machine != nil},
	}
	for _, f := range files {
		if !f.have {
			continue
		}
		if err := writeCSV(dir, f.name, f.header, f.rows); err != nil {
			return err
		}
	}
	return nil
}
