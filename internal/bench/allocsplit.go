package bench

import (
	"fmt"
	"os"
	"strings"

	"github.com/google/pprof/profile"
)

// Who allocates what the collector must clear. A profiled window (--pprof:
// startProfileExtras) records the heap's allocation profile after a
// collection at its start and again at its end, so the difference is the
// bytes allocated in the window (sampled by the runtime, one sample per
// 512 KB on average). Each allocation counts for the first component found
// on its stack, from the allocating function outwards: a cipher or a codec
// function counts for whoever called it, and a party's handler called from
// the NATS client's reader counts for the party. The profile is this
// process's: parties run as processes of their own (--party-bin) allocate
// outside it.

// The components of an allocation split, in the order they are written.
var allocWho = []string{"nats-server", "nats-client", "duet", "harness", "other"}

// allocComponent names the component a function belongs to, "" for a
// function of none (the runtime, the standard library, pkg/ of this
// module, other libraries): the next frame outwards decides.
func allocComponent(fn string) string {
	switch {
	case strings.HasPrefix(fn, "github.com/nats-io/nats-server/"):
		return "nats-server"
	case strings.HasPrefix(fn, "github.com/nats-io/nats.go"), strings.HasPrefix(fn, "github.com/nats-io/nats%2ego"):
		return "nats-client"
	case strings.HasPrefix(fn, "github.com/duet-mpc/duet/internal/bench."):
		return "harness"
	case strings.HasPrefix(fn, "github.com/duet-mpc/duet/internal/"):
		return "duet"
	}
	return ""
}

// allocSplitOf sums a profile's allocated bytes (alloc_space) by component.
func allocSplitOf(raw []byte) (map[string]int64, error) {
	prof, err := profile.ParseData(raw)
	if err != nil {
		return nil, fmt.Errorf("bench: reading an allocation profile: %w", err)
	}
	vi := -1
	for i, st := range prof.SampleType {
		if st.Type == "alloc_space" {
			vi = i
		}
	}
	if vi < 0 {
		return nil, fmt.Errorf("bench: the allocation profile has no alloc_space samples")
	}
	by := map[string]int64{}
	for _, s := range prof.Sample {
		who := "other"
	stack:
		for _, loc := range s.Location {
			// A location's lines run from the innermost inlined function
			// outwards, as the locations do.
			for _, ln := range loc.Line {
				if ln.Function == nil {
					continue
				}
				if c := allocComponent(ln.Function.Name); c != "" {
					who = c
					break stack
				}
			}
		}
		by[who] += s.Value[vi]
	}
	return by, nil
}

// allocSplit is the bytes allocated between two allocation profiles of one
// process (the runtime's counts only grow), by component.
func allocSplit(start, end []byte) (map[string]int64, error) {
	a, err := allocSplitOf(start)
	if err != nil {
		return nil, err
	}
	b, err := allocSplitOf(end)
	if err != nil {
		return nil, err
	}
	for who, v := range a {
		b[who] -= v
	}
	return b, nil
}

// writeAllocSplit writes the split as CSV: who,bytes,share (share of the
// window's total, 0..1).
func writeAllocSplit(path string, by map[string]int64) error {
	var total int64
	for _, v := range by {
		total += max(v, 0)
	}
	var b strings.Builder
	b.WriteString("who,bytes,share\n")
	for _, who := range allocWho {
		share := 0.0
		if total > 0 {
			share = float64(max(by[who], 0)) / float64(total)
		}
		fmt.Fprintf(&b, "%s,%d,%.4f\n", who, by[who], share)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
