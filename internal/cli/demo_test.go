package cli

import (
	"bytes"
	"context"
	"errors"
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
