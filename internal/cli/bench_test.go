package cli

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duet-mpc/duet/internal/bench"
	"github.com/duet-mpc/duet/internal/stall"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// The summary's scale table shows the parties' and the server's share of
// the CPU beside the floor's, and n/a where the split was not measured, and
// the floor's stalls beside the step's.
func TestPrintSummaryScaleRoles(t *testing.T) {
	nan := math.NaN()
	rep := &bench.Report{ScaleLimit: 10 * time.Millisecond, Scale: []bench.ScaleRow{
		{Loops: 200, Persist: true, Ticks: 30000, CPU: 1.52, OK: true, Stalls: 3, StallMax: 7100 * time.Microsecond, FloorStalls: 9, FloorStallMax: 23800 * time.Microsecond,
			Roles:      bench.RoleCPU{Party: [2]float64{0.26, 0.33}, Broker: 0.61, Samples: 900},
			FloorRoles: bench.RoleCPU{Party: [2]float64{0.13, 0.16}, Broker: 0.52, Samples: 700}},
		{Loops: 300, Ticks: 45000, CPU: 1.45, Try: 2,
			Roles:      bench.RoleCPU{Party: [2]float64{nan, nan}, Broker: nan},
			FloorRoles: bench.RoleCPU{Party: [2]float64{nan, nan}, Broker: nan}},
	}}
	var buf bytes.Buffer
	printSummary(&buf, rep, "out")
	out := buf.String()
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "200" || f[0] == "300") {
			rows = append(rows, l)
		}
	}
	if !strings.Contains(out, "parties (floor)") || len(rows) != 2 {
		t.Fatalf("no scale table with the roles:\n%s", out)
	}
	if !strings.Contains(rows[0], "0.59 (0.29)") || !strings.Contains(rows[0], "0.61 (0.52)") {
		t.Errorf("200 loops: want the parties 0.59 (floor 0.29) and the server 0.61 (0.52): %q", rows[0])
	}
	if !strings.Contains(rows[1], "n/a (n/a)") {
		t.Errorf("300 loops, not measured: want n/a: %q", rows[1])
	}
	// The step's stalls beside its floor's, each with the worst.
	if !strings.Contains(rows[0], "9 (23.8)") || !strings.Contains(rows[0], "3 (7.1)") || !strings.Contains(out, "floor stalls (worst ms)") {
		t.Errorf("200 loops: want the floor's 9 stalls (worst 23.8 ms) and the step's 3 (7.1): %q", rows[0])
	}
	// The second column is the step's try at its loop count (1 where unset).
	if f0, f1 := strings.Fields(rows[0]), strings.Fields(rows[1]); f0[1] != "1" || f1[1] != "2" {
		t.Errorf("try column: %q and %q, want 1 and 2", rows[0], rows[1])
	}
}

// The summary shows the machine's idle checks, one line each, and none
// when they were not run.
func TestPrintSummaryIdle(t *testing.T) {
	rep := &bench.Report{ScaleLimit: 10 * time.Millisecond, Idle: []bench.IdleRow{
		{When: "before", Took: 10 * time.Second, Result: stall.Result{Wakeups: 9100, Count: 4, Worst: 22400 * time.Microsecond}, CPU: 0.034},
		{When: "after", Took: 10 * time.Second, Result: stall.Result{Wakeups: 9050, Count: 0, Worst: 3 * time.Millisecond}, CPU: 0.031},
	}}
	var buf bytes.Buffer
	printSummary(&buf, rep, "out")
	out := buf.String()
	var rows [][]string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "before" || f[0] == "after") {
			rows = append(rows, f)
		}
	}
	want := [][]string{{"before", "the", "scale", "search", "10.0", "9100", "4", "22.4", "0.034"}, {"after", "the", "scale", "search", "10.0", "9050", "0", "3.0", "0.031"}}
	if !strings.Contains(out, "nothing of the bench running") || len(rows) != 2 || !slices.Equal(rows[0], want[0]) || !slices.Equal(rows[1], want[1]) {
		t.Errorf("idle rows %q, want %q in:\n%s", rows, want, out)
	}
	buf.Reset()
	printSummary(&buf, &bench.Report{ScaleLimit: 10 * time.Millisecond}, "out")
	if strings.Contains(buf.String(), "nothing of the bench running") {
		t.Errorf("idle section without checks:\n%s", buf.String())
	}
}

// The summary's first line says where the parties' state was persisted.
func TestPrintSummaryStateStore(t *testing.T) {
	for _, c := range []struct {
		file bool
		want string
	}{{false, "state persisted to JetStream memory storage"}, {true, "state persisted to JetStream file storage"}} {
		var buf bytes.Buffer
		printSummary(&buf, &bench.Report{Server: bench.Embedded, StateFileStore: c.file, ScaleLimit: 10 * time.Millisecond}, "out")
		if first, _, _ := strings.Cut(buf.String(), "\n"); !strings.Contains(first, c.want) {
			t.Errorf("StateFileStore=%v: first line %q, want %q", c.file, first, c.want)
		}
	}
}

// The summary's first line names the scale search's mask variant.
func TestPrintSummaryMask(t *testing.T) {
	for _, v := range []mpc.Variant{mpc.PerTick, mpc.FixedMask} {
		var buf bytes.Buffer
		printSummary(&buf, &bench.Report{Server: bench.Embedded, ScaleVariant: v, ScaleLimit: 10 * time.Millisecond}, "out")
		want := "scale loops with the " + v.String() + " mask"
		if first, _, _ := strings.Cut(buf.String(), "\n"); !strings.Contains(first, want) {
			t.Errorf("%v: first line %q, want %q", v, first, want)
		}
	}
}

// The summary's first line says when the scale search's loops ran the
// two-hop tick (duet bench --two-hop), and says nothing of it otherwise.
func TestPrintSummaryTwoHop(t *testing.T) {
	for _, two := range []bool{false, true} {
		var buf bytes.Buffer
		printSummary(&buf, &bench.Report{Server: bench.Embedded, ScaleTwoHop: two, ScaleLimit: 10 * time.Millisecond}, "out")
		first, _, _ := strings.Cut(buf.String(), "\n")
		if got := strings.Contains(first, "per-tick mask and the two-hop tick"); got != two || (!two && strings.Contains(first, "two-hop")) {
			t.Errorf("two-hop %v: first line %q", two, first)
		}
	}
}

// The summary's first line names the party binary when the tick cases and
// the scale search ran the parties in their own processes, and says nothing
// of it otherwise.
func TestPrintSummaryPartyBin(t *testing.T) {
	for _, bin := range []string{"", "/opt/duet/party"} {
		var buf bytes.Buffer
		printSummary(&buf, &bench.Report{Server: bench.Embedded, PartyBin: bin, ScaleLimit: 10 * time.Millisecond}, "out")
		first, _, _ := strings.Cut(buf.String(), "\n")
		if got := strings.Contains(first, "parties as processes of "+bin); got != (bin != "") || (bin == "" && strings.Contains(first, "processes")) {
			t.Errorf("party binary %q: first line %q", bin, first)
		}
	}
}

// --party-bin is made absolute: a bare name would otherwise be looked up in
// PATH when the bench starts it, not taken from the directory it was
// checked in.
func TestExecutablePath(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "party"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	got, err := executablePath("party")
	if want := filepath.Join(dir, "party"); err != nil || got != want {
		t.Errorf("executablePath(party) = %q, %v; want %q", got, err, want)
	}
}

// cancelOn is a progress writer that ends the run when a line containing
// marker is written.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	cancel context.CancelFunc
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.marker) {
		w.cancel()
	}
	return len(p), nil
}

// An interrupted bench (Ctrl-C) says it was interrupted and where the
// results of what finished are, prints their summary, and has written their
// files; the section it was in leaves nothing behind.
func TestBenchInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick Fig. 5 section")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := t.TempDir()
	stderr := &cancelOn{marker: "bench: tick ...", cancel: cancel}
	var stdout bytes.Buffer
	err := Run(ctx, []string{"bench", "--quick", "--only", "fig5,tick", "--examples", "../../examples/qube-servo2", "--out", out}, &stdout, stderr)
	if err == nil {
		t.Fatalf("interrupted bench returned no error")
	}
	if !strings.Contains(err.Error(), "interrupted") || !strings.Contains(err.Error(), out) || !errors.Is(err, context.Canceled) {
		t.Fatalf("error %q: want it to say interrupted, name %s and wrap context.Canceled", err, out)
	}
	for _, f := range []string{"protocol1.csv", "protocol2.csv", "fig5.png"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s of the finished section: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "tick.csv")); err == nil {
		t.Errorf("tick.csv written although the tick section was interrupted before its first case")
	}
	if !strings.Contains(stdout.String(), "protocol1") {
		t.Errorf("summary without the finished Fig. 5 rows:\n%s", stdout.String())
	}
	// The summary is kept beside the files, as printed.
	if b, err := os.ReadFile(filepath.Join(out, "summary.txt")); err != nil || string(b) != stdout.String() {
		t.Errorf("summary.txt (%v):\n%s\nwant what was printed:\n%s", err, b, stdout.String())
	}
}

// --step-duration sets the measured window of the scale steps: one loop at
// 25 Hz sends about 25 measured ticks a second, so a 1-s window has about
// 25 and the quick plan's 2-s window about 50. With --live-dealers, dealers
// check the queues meanwhile, the summary and scale_detail.csv say so, and
// no tick misses. With --cold-heap nothing is faulted in after the set-up,
// and the summary and scale_detail.csv say so too.
func TestBenchStepDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a quick scale step")
	}
	out := t.TempDir()
	var stdout bytes.Buffer
	err := Run(t.Context(), []string{"bench", "--quick", "--only", "scale", "--loops", "1", "--step-duration", "1s",
		"--live-dealers", "100ms", "--cold-heap", "--examples", "../../examples/qube-servo2", "--out", out}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(stdout.String(), "\n"); !strings.Contains(first, "dealers checking their queues during the steps (DUET_POLL_MAX=100ms)") {
		t.Errorf("--live-dealers 100ms: first line %q", first)
	}
	if first, _, _ := strings.Cut(stdout.String(), "\n"); !strings.Contains(first, "each scale step on a cold heap") {
		t.Errorf("--cold-heap: first line %q", first)
	}
	b, err := os.ReadFile(filepath.Join(out, "scale_detail.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("scale_detail.csv: %d rows, %v", len(rows), err)
	}
	col, miss, live := slices.Index(rows[0], "ticks"), slices.Index(rows[0], "misses"), slices.Index(rows[0], "live_dealers_poll_max_ms")
	prefault := slices.Index(rows[0], "prefault_mb")
	if col < 0 || miss < 0 || live < 0 || prefault < 0 {
		t.Fatalf("scale_detail.csv has no ticks, misses or live_dealers_poll_max_ms column: %q", rows[0])
	}
	for _, r := range rows[1:] {
		n, err := strconv.Atoi(r[col])
		if err != nil || n < 20 || n > 30 {
			t.Errorf("a step of 1 loop for 1 s measured %s ticks, want about 25", r[col])
		}
		if r[miss] != "0" {
			t.Errorf("a step of 1 loop with live dealers missed %s ticks", r[miss])
		}
		if r[live] != "100" {
			t.Errorf("live_dealers_poll_max_ms %q, want 100 (--live-dealers 100ms)", r[live])
		}
		if r[prefault] != "0" {
			t.Errorf("prefault_mb %q, want 0 (--cold-heap)", r[prefault])
		}
	}
}
