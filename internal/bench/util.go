package bench

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/duet-mpc/duet/internal/stall"
)

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// minorFaults is the process's minor page faults so far (getrusage); 0
// where they cannot be read.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Minflt)
}

// cpuMeter measures, over an interval, the process's CPU time and the CPU
// time the hypervisor took from this machine (steal): on a shared VM the
// second takes cores from the bench whatever the code under test does, so
// a row measured while the host was busy can be told from a slow one.
type cpuMeter struct {
	began   time.Time
	cpu     time.Duration
	steal   uint64 // USER_HZ ticks
	stealOK bool
}

func startCPUMeter() cpuMeter {
	m := cpuMeter{began: time.Now(), cpu: cpuTime()}
	m.steal, m.stealOK = machineSteal()
	return m
}

// cores returns the process's CPU and the machine's stolen CPU since the
// start, each in cores (seconds per second of wall), over wall (0: the
// time since the start). stolen is NaN where steal cannot be read.
func (m cpuMeter) cores(wall time.Duration) (process, stolen float64) {
	cpu := cpuTime()
	steal, ok := machineSteal()
	if wall <= 0 {
		wall = time.Since(m.began)
	}
	process = (cpu - m.cpu).Seconds() / wall.Seconds()
	stolen = math.NaN()
	if ok && m.stealOK {
		stolen = float64(steal-m.steal) / userHZ / wall.Seconds()
	}
	return process, stolen
}

// Cores formats a number of cores (CPU seconds per second), "n/a" for NaN.
func Cores(x float64) string { return orNA(x, 2) }

// Megabytes formats a resident size in MB (processRSS), "n/a" for NaN.
func Megabytes(x float64) string { return orNA(x, 0) }

// orNA formats x with prec decimals, "n/a" for NaN (unknown).
func orNA(x float64, prec int) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

// processRSS is the bench process's resident memory in MB (Linux:
// /proc/self/status, VmRSS); NaN where it cannot be read. On the VM the
// bench is developed on, a process that holds much memory and wakes often
// makes every process's wake-ups late (README, Loops per party pair), so a
// step's figures are read beside it.
func processRSS() float64 {
	kb, ok := readCounter("/proc/self/status", parseRSS)
	if !ok {
		return math.NaN()
	}
	return float64(kb) / 1024
}

// parseRSS reads the VmRSS line of /proc/PID/status, in kB.
func parseRSS(status []byte) (uint64, error) {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("bench: /proc/self/status: VmRSS line %q, want a size in kB", bytes.TrimSpace(line))
		}
		v, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc/self/status: VmRSS: %w", err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("bench: /proc/self/status has no VmRSS line")
}

// machineSteal is the machine's stolen CPU time so far in USER_HZ ticks
// (Linux: /proc/stat); ok is false where it cannot be read.
func machineSteal() (uint64, bool) { return readCounter("/proc/stat", parseSteal) }

// readCounter reads a counter from the file at path with parse; ok is false
// where the file cannot be read or parsed (a /proc file on another OS).
func readCounter(path string, parse func([]byte) (uint64, error)) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := parse(b)
	return n, err == nil
}

// userHZ is the unit of /proc/stat's times: USER_HZ, 100 on every Linux
// architecture Go supports (the kernel ABI fixes it, whatever CONFIG_HZ).
const userHZ = 100

// parseSteal reads the steal time of the aggregate "cpu" line of
// /proc/stat: its eighth value (user nice system idle iowait irq softirq
// steal ...), in USER_HZ ticks.
func parseSteal(stat []byte) (uint64, error) {
	for line := range bytes.Lines(stat) {
		f := bytes.Fields(line)
		if len(f) == 0 || string(f[0]) != "cpu" {
			continue
		}
		if len(f) < 9 {
			return 0, fmt.Errorf("bench: /proc/stat: cpu line has %d values, want at least 8 (no steal field)", len(f)-1)
		}
		v, err := strconv.ParseUint(string(f[8]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc/stat: steal %q: %w", f[8], err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("bench: /proc/stat: no aggregate cpu line")
}

// StallThreshold: a wake-up of the stall monitor (internal/stall) more
// than this late counts as a stall in the scale rows and the idle checks.
const StallThreshold = 5 * time.Millisecond

// startStallMonitor starts the scale rows' stall monitor.
func startStallMonitor() *stall.Monitor { return stall.Start(StallThreshold) }

// quiesce collects what the bench's earlier sections left behind (hundreds
// of MB after a scale step) and returns it to the OS at once, before the
// next measurement: otherwise the Go runtime marks it and releases it in the
// background during that measurement (after a 300-loop search, a 1 ms
// sleeper in this process was woken more than 5 ms late 14 times in 10 s,
// and one in a separate process right after none).
//
// It is for the scale search and the idle checks only, whose processes are
// large: the Fig. 5 points, tick cases and dealer points run in a warm
// process, as a service does after its first minutes. Quiescing before each
// of them (tried in the eighteenth session) made them slower, not cleaner:
// on this VM a page fault cost 11-15 µs that day, and a point that starts with
// its memory returned to the OS faults it in again, so the dealer's rates
// halved and Protocol 1's Fig. 5 means rose 1.3-2x.
var quiesce = func() { debug.FreeOSMemory() } // a variable: the tests count the calls

// prefaultHeap collects, then allocates and touches (one write a page) the
// headroom the heap will grow into before its next collection (the heap
// goal less the live objects), and drops it: the pages stay mapped, as free
// heap the runtime reuses, so a measurement that starts now runs in memory
// already faulted in, as a process that has served its load for a while
// does, instead of faulting in its heap's growth page by page. It returns
// the bytes touched.
//
// Not all of them stay mapped: the runtime's scavenger returns some free
// pages to the OS (MADV_DONTNEED), which the heap faults in again. With
// GODEBUG=scavtrace=1 at 400 loops (forty-fourth session), the touch grew
// the heap past the scavenger's retention goal, which released 316 MB of
// other free pages at once, and after the final forced collection the
// scavenger returned 119 MB more before the step's first collection, so a
// step still takes thousands of faults a second (page_faults_per_s). A
// variant with the collector off during the touch and no forced collection
// did not clearly reduce them and was not kept; GODEBUG=madvdontneed=0
// (MADV_FREE) does, for no CPU saving seen (README, Measured results).
//
// The touch is at most maxPrefault, and at most half the memory available
// to the process (prefaultSize, memAvailable), rounded up to whole MiB:
// with the collector off (GOGC=off) the heap goal is the memory limit, by
// default about 2^63 bytes, which the touch would try to allocate and crash
// on, and with GOMEMLIMIT set it would fill the machine's memory up to that
// limit.
func prefaultHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	n := prefaultSize(s[0].Value.Uint64(), s[1].Value.Uint64(), memAvailable())
	if n == 0 {
		return 0
	}
	// In chunks, not one object: the runtime places new spans at the lowest
	// free addresses, so the chunks fill the free pages the next spans would
	// take (some released to the OS by quiesce), where one large object could
	// land above them and be left unused.
	const chunk = 1 << 20
	held := make([][]byte, 0, n/chunk+1)
	for k := uint64(0); k < n; k += chunk {
		b := make([]byte, chunk)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held = append(held, b)
	}
	runtime.KeepAlive(held)
	held = nil
	runtime.GC()
	return n
}

// maxPrefault bounds prefaultHeap's touch: 16 GiB, ten times the headroom
// of the largest scale step measured with the collector on (1.5 GB at 600
// loops; a variable: the tests lower it).
var maxPrefault uint64 = 16 << 30

// prefaultSize is what prefaultHeap touches: the heap's goal less its live
// objects, at most maxPrefault and, when avail (memAvailable; 0 if unknown)
// is known, at most half of it.
func prefaultSize(goal, live, avail uint64) uint64 {
	if goal <= live {
		return 0
	}
	n := min(goal-live, maxPrefault)
	if avail > 0 {
		n = min(n, avail/2)
	}
	return n
}

// memAvailable is the memory available to the process, or 0 where it
// cannot be read: the system's (MemAvailable in /proc/meminfo), or a
// container's if less (its cgroup v2 memory.max less memory.current, where
// /sys/fs/cgroup is the container's own, as in Docker and Kubernetes).
func memAvailable() uint64 {
	avail := uint64(0)
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 3 && f[0] == "MemAvailable:" && f[2] == "kB" {
				if kb, err := strconv.ParseUint(f[1], 10, 64); err == nil {
					avail = kb << 10
				}
				break
			}
		}
	}
	if c, ok := cgroupAvailable("/sys/fs/cgroup"); ok && (avail == 0 || c < avail) {
		avail = max(c, 1)
	}
	return avail
}

// cgroupAvailable is a cgroup v2 directory's memory.max less its
// memory.current; false without a limit ("max", or no such files).
func cgroupAvailable(dir string) (uint64, bool) {
	read := func(name string) (uint64, bool) {
		b, err := os.ReadFile(dir + "/" + name)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	limit, ok := read("memory.max")
	if !ok {
		return 0, false
	}
	used, _ := read("memory.current")
	if used >= limit {
		return 0, true
	}
	return limit - used, true
}
