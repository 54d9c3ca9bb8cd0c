package bench

import (
	"math"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestParseIOSyscalls(t *testing.T) {
	checkParser(t, "parseIOSyscalls", parseIOSyscalls,
		"rchar: 123\nwchar: 456\nsyscr: 1000\nsyscw: 234\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n", 1234, map[string]string{
			"no syscw":     "syscr: 1\n",
			"not a number": "syscr: 1\nsyscw: x\n",
			"negative":     "syscr: -1\nsyscw: 2\n",
			"empty":        "",
		})
	// The process's own counters move with its system calls.
	a, ok := ioSyscalls()
	if runtime.GOOS != "linux" {
		t.Skip("no /proc/self/io")
	}
	if !ok {
		t.Fatal("/proc/self/io not readable")
	}
	for i := 0; i < 10; i++ {
		runtime.Gosched()
		ioSyscalls() // reads the file: system calls
	}
	if b, _ := ioSyscalls(); b < a+10 {
		t.Errorf("system calls %d then %d after reading /proc/self/io ten times", a, b)
	}
}

func TestHistQuantile(t *testing.T) {
	us := 1e-6
	buckets := []float64{0, 1 * us, 2 * us, 4 * us, math.Inf(1)}
	a := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{5, 7, 0, 0}}
	b := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{5, 105, 1, 1}}
	// Between a and b: 98 in [1, 2) µs, 1 in [2, 4) µs, 1 at 4 µs or more.
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 2 * time.Microsecond}, {0.98, 2 * time.Microsecond}, {0.99, 4 * time.Microsecond}, {1, 4 * time.Microsecond}} {
		if got := histQuantile(a, b, c.q); got != c.want {
			t.Errorf("q %v: %v, want %v", c.q, got, c.want)
		}
	}
	if got := histQuantile(b, b, 0.99); got != 0 {
		t.Errorf("no observations: %v, want 0", got)
	}
	if got := histQuantile(nil, b, 0.99); got != 0 {
		t.Errorf("no histogram: %v, want 0", got)
	}
	// The runtime's own histogram: goroutines that wait for each other are
	// counted, and their waits are short on an idle machine.
	m := startWaitMeter()
	done := make(chan struct{})
	for i := 0; i < 100; i++ {
		go func() { done <- struct{}{} }()
		<-done
	}
	w := m.end()
	if w.SchedP99 <= 0 || w.SchedP99 > time.Second {
		t.Errorf("run-queue p99 %v over 100 goroutine hand-offs", w.SchedP99)
	}
	if runtime.GOOS == "linux" && (math.IsNaN(w.Syscalls) || w.Syscalls < 0) {
		t.Errorf("system calls %v", w.Syscalls)
	}
	if got := perTick(10, 4); got != 2.5 {
		t.Errorf("perTick(10, 4) = %v", got)
	}
	if got := perTick(10, 0); !math.IsNaN(got) {
		t.Errorf("perTick with no ticks = %v, want NaN", got)
	}
}

// checkParser checks that parse reads want from good and refuses each of
// bad.
func checkParser(t *testing.T, name string, parse func([]byte) (uint64, error), good string, want uint64, bad map[string]string) {
	t.Helper()
	if got, err := parse([]byte(good)); err != nil || got != want {
		t.Fatalf("%s(%q) = %d, %v; want %d", name, good, got, err, want)
	}
	for what, b := range bad {
		if v, err := parse([]byte(b)); err == nil {
			t.Errorf("%s: %s(%q) = %d, want an error", what, name, b, v)
		}
	}
}

// checkWaits checks a row's run-queue p99 and system calls per tick: every
// tick of a loop is several messages, and at least the sensor's publication
// and a reader's wake-up are system calls.
func checkWaits(t *testing.T, what string, sched time.Duration, perTick float64) {
	t.Helper()
	if sched <= 0 || sched > 10*time.Second {
		t.Errorf("%s: run-queue p99 %v", what, sched)
	}
	if runtime.GOOS == "linux" && (math.IsNaN(perTick) || perTick < 2 || perTick > 1000) {
		t.Errorf("%s: %v system calls per tick", what, perTick)
	}
}
