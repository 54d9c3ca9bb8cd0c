package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"runtime/metrics"
	"strconv"
	"time"
)

// A loaded scale step fails long before the process uses both cores all the
// time: its ticks wait. waitMeter measures two things that show where, over
// a step's window, beside its CPU (cpuMeter):
//   - the run-queue wait: how long the process's goroutines (parties,
//     harness and, when embedded, the NATS server) were runnable before a
//     CPU ran them (the Go scheduler's /sched/latencies:seconds), as a p99;
//   - the process's read and write system calls (Linux: /proc/self/io,
//     syscr + syscw), which are most of the bare messaging's cost: the fewer
//     per tick, the more messages each call carried.

// schedLatencies is the Go runtime's histogram of run-queue waits.
const schedLatencies = "/sched/latencies:seconds"

type waitMeter struct {
	sched     *metrics.Float64Histogram
	calls     uint64
	callsKnow bool
}

func startWaitMeter() waitMeter {
	m := waitMeter{sched: readSchedLatencies()}
	m.calls, m.callsKnow = ioSyscalls()
	return m
}

// waits is what a waitMeter measured.
type waits struct {
	// SchedP99 is the 99th percentile of the run-queue waits (the upper
	// bound of the runtime histogram's bucket that holds it); 0 with no
	// waits counted.
	SchedP99 time.Duration
	// Syscalls is the number of read and write system calls; NaN where
	// they cannot be read.
	Syscalls float64
}

func (m waitMeter) end() waits {
	w := waits{SchedP99: histQuantile(m.sched, readSchedLatencies(), 0.99), Syscalls: math.NaN()}
	if calls, ok := ioSyscalls(); ok && m.callsKnow {
		w.Syscalls = float64(calls - m.calls)
	}
	return w
}

// perTick is n per tick (NaN stays NaN; no ticks: NaN).
func perTick(n float64, ticks int) float64 {
	if ticks <= 0 {
		return math.NaN()
	}
	return n / float64(ticks)
}

func readSchedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// histQuantile is quantile q of the observations added to a cumulative
// runtime histogram between snapshots a and b, as the upper bound of the
// bucket that holds it (its lower bound for the unbounded last bucket). It
// is 0 with no observations or no histogram.
func histQuantile(a, b *metrics.Float64Histogram, q float64) time.Duration {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) {
		return 0
	}
	var total uint64
	for i := range b.Counts {
		total += b.Counts[i] - a.Counts[i]
	}
	if total == 0 {
		return 0
	}
	need := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range b.Counts {
		seen += b.Counts[i] - a.Counts[i]
		if seen >= need {
			bound := b.Buckets[i+1]
			if math.IsInf(bound, 1) {
				bound = b.Buckets[i]
			}
			return time.Duration(bound * float64(time.Second))
		}
	}
	return 0
}

// ioSyscalls is the process's read and write system calls so far (Linux:
// /proc/self/io); ok is false where they cannot be read.
func ioSyscalls() (uint64, bool) { return readCounter("/proc/self/io", parseIOSyscalls) }

// parseIOSyscalls adds the syscr and syscw fields of a /proc/<pid>/io file.
func parseIOSyscalls(b []byte) (uint64, error) {
	var sum uint64
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, value, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok || (string(name) != "syscr" && string(name) != "syscw") {
			continue
		}
		v, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/self/io: %s: %w", name, err)
		}
		sum += v
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("/proc/self/io: syscr and syscw not both found")
	}
	return sum, nil
}
