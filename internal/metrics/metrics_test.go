package metrics

import (
	"io"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

func TestSumBy(t *testing.T) {
	s := New("party")
	s.Abandoned.WithLabelValues("a", "late").Add(3)
	s.Abandoned.WithLabelValues("b", "late").Add(2)
	s.Abandoned.WithLabelValues("b", "no_item").Inc()
	by := SumBy(s.Abandoned, "reason")
	if len(by) != 2 || by["late"] != 5 || by["no_item"] != 1 {
		t.Errorf("by reason: %v, want late 5 and no_item 1", by)
	}
	if by := SumBy(s.Abandoned, "loop"); by["a"] != 3 || by["b"] != 3 {
		t.Errorf("by loop: %v, want a 3 and b 3", by)
	}
	if got := Sum(s.Abandoned); got != 6 {
		t.Errorf("Sum: %v, want 6", got)
	}
	if got := Sum(s.Misses); got != 0 {
		t.Errorf("Sum of an empty vector: %v", got)
	}
}

// TestRuntimeMetrics: every service's registry exports its process and Go
// runtime, the scheduler's run-queue waits among them, and two services in
// one process (the demo) each have theirs.
func TestRuntimeMetrics(t *testing.T) {
	a, b := New("party"), New("actuator")
	done := make(chan struct{})
	for i := 0; i < 100; i++ { // goroutine hand-offs: run-queue waits to count
		go func() { done <- struct{}{} }()
		<-done
	}
	mfs, err := a.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		if mf.GetName() == "go_sched_latencies_seconds" {
			if h := mf.GetMetric()[0].GetHistogram(); h == nil || h.GetSampleCount() == 0 {
				t.Errorf("go_sched_latencies_seconds: %v, want a histogram with waits counted", mf)
			}
		}
	}
	want := []string{"go_sched_latencies_seconds", "go_goroutines", "go_gc_duration_seconds"}
	if runtime.GOOS == "linux" {
		want = append(want, "process_cpu_seconds_total", "process_resident_memory_bytes")
	}
	for _, name := range want {
		if !got[name] {
			t.Errorf("%s not exported", name)
		}
	}
	rec := httptest.NewRecorder()
	b.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 200 || !strings.Contains(string(body), "go_sched_latencies_seconds_bucket") {
		t.Errorf("/metrics of a second service: %d, run-queue waits missing", rec.Code)
	}
}
