package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The loopback round trips are timed one per gap, each a real echo over
// TCP; a cancelled context and a count below one are errors.
func TestLoopbackRTTs(t *testing.T) {
	lat, err := loopbackRTTs(context.Background(), 10, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 10 {
		t.Fatalf("%d round trips, want 10", len(lat))
	}
	for i, d := range lat {
		if d <= 0 || d > 5*time.Second {
			t.Errorf("round trip %d: %v", i, d)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := loopbackRTTs(ctx, 10, time.Millisecond); err != context.Canceled {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
	if _, err := loopbackRTTs(context.Background(), 0, time.Millisecond); err == nil || !strings.Contains(err.Error(), "0 round trips") {
		t.Errorf("no round trips: %v", err)
	}
}

// The machine's row says what it measured, in the units it measured.
func TestMachineRowString(t *testing.T) {
	m := MachineRow{MatVec: 33100 * time.Nanosecond, MatVecRuns: 200, RTTs: 1000, RTTMin: 21 * time.Microsecond, RTTP50: 48 * time.Microsecond, RTTP99: 112500 * time.Nanosecond}
	want := "a 100x100 matrix times a vector over 2^127-1 in 33.1 µs (the best of 200); a loopback TCP round trip p50 48.0 µs, p99 112.5 µs, min 21.0 µs (1000, one every 1ms)"
	if got := m.String(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
