package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestDemoDurationTooShort: a run that ends before the pendulum's balance is
// checked is refused up front as a usage error naming the limit, not run and
// then reported as a pendulum that did not balance.
func TestDemoDurationTooShort(t *testing.T) {
	t.Chdir("../..") // the examples' files
	for _, c := range []struct{ dur, want string }{
		{"2s", "checked for balance from 3s on"},
		{"3s", "longer than 3.04s"},
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

// A deadline or a dealer count that cannot run is a usage error naming the
// flag, not silently replaced by the default.
func TestDemoFlagsChecked(t *testing.T) {
	t.Chdir("../..")
	for _, c := range []struct{ flag, val, want string }{
		{"--deadline", "0s", "--deadline 0s: want > 0"},
		{"--deadline", "-1ms", "--deadline -1ms"},
		{"--dealers", "0", "--dealers 0: want at least 1"},
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
	if !(bound > 0) || diff > bound || strings.Contains(out, "the sensor's reference") || !strings.Contains(out, "balanced: ") {
		t.Fatalf("max |u - uplain| %g, bound %g:\n%s", diff, bound, out)
	}
}
