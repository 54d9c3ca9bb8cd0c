package demo

import (
	"strings"
	"testing"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// follow advances the reference on the kept ticks only: after a tick the
// parties gave up, its outputs come from the state they still hold, where
// the sensor's reference (a step per measurement) is one update ahead.
func TestFollowSkipsTheUpdatesGivenUp(t *testing.T) {
	spec := mpc.ControllerSpec{A: [][]float64{{0.5}}, B: [][]float64{{1}}, C: [][]float64{{1}}, D: [][]float64{{0}}, X0: []float64{0}}
	recs := []TickRecord{{Tick: 1, Y: []float64{1}}, {Tick: 2, Y: []float64{1}}, {Tick: 3, Y: []float64{1}}, {Tick: 4}, {Tick: 5, Y: []float64{1}}}
	if err := follow(spec, recs, map[uint64]bool{1: true, 2: true, 5: true}); err != nil {
		t.Fatal(err)
	}
	// x: 0 -> 1 (tick 1) -> 1.5 (tick 2); tick 3 given up; tick 4 sent nothing.
	want := map[uint64][]float64{1: {0}, 2: {1}, 3: {1.5}, 4: nil, 5: {1.5}}
	for _, r := range recs {
		if w := want[r.Tick]; len(r.UPlain) != len(w) || len(w) == 1 && r.UPlain[0] != w[0] {
			t.Errorf("tick %d: u_plain %v, want %v", r.Tick, r.UPlain, w)
		}
	}
	// The sensor's reference, stepping on every measurement, is ahead at tick 5.
	fc := spec.NewFloatController()
	var ahead float64
	for _, r := range recs {
		if r.Y != nil {
			ahead = fc.Step(r.Y)[0]
		}
	}
	if ahead == recs[4].UPlain[0] {
		t.Fatalf("the sensor's reference and the followed one agree at tick 5 (%g): the test shows nothing", ahead)
	}

	for _, c := range []struct {
		kept map[uint64]bool
		want string
	}{{map[uint64]bool{4: true}, "tick 4's update was kept but its measurement not recorded"},
		{map[uint64]bool{1: true, 9: true}, "2 kept updates, 1 of them on recorded ticks"}} {
		if err := follow(spec, recs, c.kept); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("kept %v: err %v, want %q", c.kept, err, c.want)
		}
	}
}

// stateVersions keeps, per version, the latest tick that made it: a
// rollback's version is made again by a later tick.
func TestStateVersionsFollowRollbacks(t *testing.T) {
	v := stateVersions{by: map[uint64]uint64{}}
	for _, e := range [][2]uint64{{1, 1}, {2, 2}, {3, 3}, {4, 2}, {5, 3}, {6, 4}, {6, 3} /* restored one behind */, {8, 4}} {
		v.on(e[0], e[1])
	}
	kept, err := v.kept()
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{1, 2, 5, 8}
	if len(kept) != len(want) {
		t.Fatalf("kept %v, want %v", kept, want)
	}
	for _, tk := range want {
		if !kept[tk] {
			t.Fatalf("kept %v, want %v", kept, want)
		}
	}
	for name, events := range map[string][][2]uint64{
		"a version skipped": {{1, 1}, {2, 3}},
		"started afresh":    {{1, 1}, {2, 2}, {3, 3}, {9, 1}},
	} {
		v := stateVersions{by: map[uint64]uint64{}}
		for _, e := range events {
			v.on(e[0], e[1])
		}
		if _, err := v.kept(); err == nil || !strings.Contains(err.Error(), "cannot be followed") {
			t.Errorf("%s: err %v", name, err)
		}
	}
}
