package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-mpc/duet/internal/demo"
)

// TestDemoDurationTooShort: a run that ends before the pendulum's balance is
// checked is refused up front as a usage error naming the limit, not run and
// then reported as a pendulum that did not balance.
func TestDemoDurationTooShort(t *testing.T) {
	t.Chdir("../..") // the examples' files
	for _, c := range []struct{ dur, want string }{
		{"2s", "checked for balance from 3s on"},
		{"3s", "at least 3.04s"},
		{"3.039s", "at least 3.04s"},
		{"0s", "want at least one period (40ms)"},
		{"-5s", "want at least one period"},
	} {
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), []string{"demo", "--duration", c.dur, "--out", ""}, &stdout, &stderr)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--duration "+c.dur) {
			t.Errorf("demo --duration %s: err %v; want a usage error containing %q", c.dur, err, c.want)
		}
		if stdout.Len() > 0 {
			t.Errorf("demo --duration %s ran: %s", c.dur, stdout.String())
		}
	}
}

// TestDemoDurationOtherPeriod: with a period that does not divide 3 s
// (70 ms: the check starts at tick 43, 3.01 s), a run of 3.075 s has 43
// ticks, none after the first checked, and is refused up front; before, it
// ran and failed as a pendulum that did not balance.
func TestDemoDurationOtherPeriod(t *testing.T) {
	dir := t.TempDir()
	t.Chdir("../..")
	spec := filepath.Join(dir, "plant.json")
	if err := os.WriteFile(spec, []byte(`{"kind":"qube-servo2","alpha0_deg":3,"theta0_deg":0,"input_delay":1,"period_ms":70}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a run not refused ends at once
	for _, c := range []struct {
		dur  string
		want bool // refused
	}{{"3.075s", true}, {"3.079s", true}, {"3.08s", false}} {
		err := Run(ctx, []string{"demo", "--plant", spec, "--duration", c.dur, "--out", ""}, io.Discard, io.Discard)
		if refused := errors.Is(err, ErrUsage); refused != c.want {
			t.Errorf("--duration %s at 70 ms: %v; want refused %v", c.dur, err, c.want)
		} else if refused && !strings.Contains(err.Error(), "at least 3.08s") {
			t.Errorf("--duration %s: %v; want the limit, 3.08s", c.dur, err)
		}
	}
}

// A deadline or a dealer count that cannot run is a usage error naming the
// flag, not silently replaced by the default.
func TestDemoFlagsChecked(t *testing.T) {
	t.Chdir("../..")
	for _, c := range []struct{ flag, val, want string }{
		{"--deadline", "0s", "--deadline 0s: want > 0"},
		{"--deadline", "-1ms", "--deadline -1ms"},
		{"--dealers", "0", "--dealers 0: want 1..16"},
		{"--dealers", "17", "--dealers 17: want 1..16"},
	} {
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), []string{"demo", c.flag, c.val, "--out", ""}, &stdout, &stderr)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("demo %s %s: err %v; want a usage error containing %q", c.flag, c.val, err, c.want)
		}
		if stdout.Len() > 0 {
			t.Errorf("demo %s %s ran: %s", c.flag, c.val, stdout.String())
		}
	}
}

// TestDemoReportsTheBound runs a short demo: it prints |u - uplain| against
// the fixed-point bound, with uplain the float64 controller on the updates
// the parties kept, and passes (the bound held and the pendulum balanced).
func TestDemoReportsTheBound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	t.Chdir("../..")
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"demo", "--fast", "--duration", "5s", "--out", ""}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	var diff, bound float64
	i := strings.Index(out, "max |u - uplain| ")
	if i < 0 {
		t.Fatalf("no max |u - uplain| line in\n%s", out)
	}
	if _, err := fmt.Sscanf(out[i:], "max |u - uplain| %g V, bound %g V (uplain: the float64 controller, stepped on the state updates the parties kept)", &diff, &bound); err != nil {
		t.Fatalf("%v: %q", err, out[i:])
	}
	if !(bound > 0) || diff > bound || strings.Contains(out, "uplain is the sensor's reference") || !strings.Contains(out, "balanced: ") {
		t.Fatalf("max |u - uplain| %g, bound %g:\n%s", diff, bound, out)
	}
}

// demoVerdict fails a run for each reason it has, all named; |u - uplain|
// over the bound only where uplain followed the parties' kept updates.
func TestDemoVerdict(t *testing.T) {
	ok := demo.Result{Summary: demo.Summary{Ticks: 100, Applied: 100, MaxDiff: 0.01}, FollowedMaxDiff: 0.01, Bound: 0.29, Balanced: true, Audit: demo.Audit{Ticks: 100}}
	for _, c := range []struct {
		name string
		edit func(*demo.Result)
		qube bool
		want []string // nil: passes
	}{
		{"ok", func(*demo.Result) {}, true, nil},
		{"over the bound", func(r *demo.Result) { r.Summary.MaxDiff, r.FollowedMaxDiff = 0.3, 0.3 }, true, []string{"max |u - uplain| 0.3 V exceeds the fixed-point bound 0.29 V"}},
		// After the tick FollowErr names, uplain is the sensor's reference:
		// only the ticks before it are held to the bound.
		{"over the bound, not followed", func(r *demo.Result) { r.Summary.MaxDiff, r.FollowErr = 0.3, errors.New("from tick 9 on") }, true, nil},
		{"over the bound before the reference stopped following", func(r *demo.Result) {
			r.Summary.MaxDiff, r.FollowedMaxDiff, r.FollowErr = 0.3, 0.3, errors.New("from tick 9 on")
		}, true, []string{"max |u - uplain| 0.3 V exceeds"}},
		{"lost updates", func(r *demo.Result) {
			r.LostUpdates = errors.New("demo: 2 ticks applied in time without their update kept")
		}, true, []string{"demo: 2 ticks applied in time without their update kept: state updates lost without a miss"}},
		{"reused", func(r *demo.Result) { r.Audit.Reused = 1 }, false, []string{"offline items mismatched or reused"}},
		{"not balanced", func(r *demo.Result) { r.Balanced, r.MaxAlpha = false, 7 }, true, []string{"the pendulum did not balance (max |α| from 3 s on: 7.00°)"}},
		{"not measured", func(r *demo.Result) { r.Balanced, r.MaxAlpha, r.Unmeasured = false, 0.35, 2 }, true,
			[]string{"the pendulum's balance is not shown: 2 ticks from 3 s on were not measured (max |α| of the others: 0.35°)"}},
		{"another plant, no balance", func(r *demo.Result) { r.Balanced = false }, false, nil},
		{"another plant, misses", func(r *demo.Result) { r.Summary.Misses = 11 }, false, []string{"the loop failed: 11 of 100 ticks missed their deadline"}},
		// A tick overtaken by a later one before its deadline has no input
		// applied: missed all the same.
		{"another plant, ticks not applied", func(r *demo.Result) { r.Summary.Applied = 89 }, false, []string{"the loop failed: 11 of 100 ticks missed their deadline"}},
		{"another plant, few not applied", func(r *demo.Result) { r.Summary.Applied = 91 }, false, nil},
		{"another plant, nothing applied", func(r *demo.Result) { r.Summary.Applied = 0 }, false, []string{"the loop failed: no input applied in time in 100 ticks"}},
		{"every reason", func(r *demo.Result) { r.FollowedMaxDiff, r.Audit.Mismatched, r.Balanced = 1, 1, false }, true,
			[]string{"demo: offline items mismatched or reused; max |u - uplain| 1 V exceeds", "; the pendulum did not balance"}},
	} {
		r := ok
		c.edit(&r)
		err := demoVerdict(r, c.qube)
		if (err == nil) != (c.want == nil) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q in it", c.name, err, w)
			}
		}
	}
}
