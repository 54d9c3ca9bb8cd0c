package demo

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
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

	// Tick 3 applied in time without its update kept: a rollback, which the
	// missed tick 4 found. Without a miss, an update was lost unseen.
	applied := func(miss4 bool) []TickRecord {
		rs := []TickRecord{{Tick: 1}, {Tick: 2}, {Tick: 3}, {Tick: 4, Miss: miss4}, {Tick: 5}}
		for i := range rs {
			rs[i].Y, rs[i].Applied = []float64{1}, true
		}
		return rs
	}
	if err := follow(spec, applied(true), map[uint64]bool{1: true, 2: true, 5: true}); err != nil {
		t.Errorf("a rollback found by a miss: %v", err)
	}
	if err := follow(spec, applied(false), map[uint64]bool{1: true, 2: true, 4: true, 5: true}); err == nil || !strings.Contains(err.Error(), "1 ticks applied in time without their update kept, more than the 0 missed ticks") {
		t.Errorf("an update lost without a miss: err %v", err)
	}
}

// stateVersions keeps, per version, the latest tick whose update made it:
// a version given up by a rollback is made again by a later tick.
func TestStateVersionsFollowRollbacks(t *testing.T) {
	type ev struct {
		tick, version uint64
		updated       bool
	}
	run := func(events []ev) (map[uint64]bool, error) {
		v := stateVersions{by: map[uint64]uint64{}}
		for _, e := range events {
			v.on(e.tick, e.version, e.updated)
		}
		return v.kept()
	}
	for name, c := range map[string]struct {
		events []ev
		kept   []uint64
	}{
		"updates":  {[]ev{{0, 0, false}, {1, 1, true}, {2, 2, true}, {3, 3, true}}, []uint64{1, 2, 3}},
		"rollback": {[]ev{{1, 1, true}, {2, 2, true}, {3, 3, true}, {4, 2, false}, {5, 3, true}, {6, 4, true}}, []uint64{1, 2, 5, 6}},
		// Restored one behind (the last update not yet written), then on.
		"restored behind": {[]ev{{1, 1, true}, {2, 2, true}, {3, 3, true}, {2, 2, false}, {5, 3, true}}, []uint64{1, 2, 5}},
		// A rollback, then a restore of the record from before it.
		"restored ahead": {[]ev{{1, 1, true}, {2, 2, true}, {3, 3, true}, {4, 2, false}, {3, 3, false}, {5, 4, true}}, []uint64{1, 2, 3, 5}},
		// Afresh from version 1: as the rollback of tick 1's update.
		"afresh from 1": {[]ev{{1, 1, true}, {0, 0, false}, {2, 1, true}}, []uint64{2}},
	} {
		kept, err := run(c.events)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(kept) != len(c.kept) {
			t.Errorf("%s: kept %v, want %v", name, kept, c.kept)
			continue
		}
		for _, tk := range c.kept {
			if !kept[tk] {
				t.Errorf("%s: kept %v, want %v", name, kept, c.kept)
			}
		}
	}
	for name, c := range map[string]struct {
		events []ev
		want   string
	}{
		"a version skipped":   {[]ev{{1, 1, true}, {2, 3, true}}, "an update at tick 2 to state version 3 from 1"},
		"an update repeated":  {[]ev{{1, 1, true}, {2, 1, true}}, "an update at tick 2 to state version 1 from 1"},
		"afresh from 3":       {[]ev{{1, 1, true}, {2, 2, true}, {3, 3, true}, {0, 0, false}, {9, 1, true}}, "state version 0 after 3"},
		"restored, no update": {[]ev{{1, 1, true}, {5, 3, false}}, "no tick made state version 2"},
	} {
		if _, err := run(c.events); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", name, err, c.want)
		}
	}
}

// With Options.Sink, the records are followed as they settle: each one
// handed over has the UPlain that Followed would give it, from the versions
// P0 reported by then. Where they cannot be followed, the records from
// that tick on keep the sensor's reference, and FollowErr says why.
func TestSettledTicksFollowKeptUpdates(t *testing.T) {
	spec := mpc.ControllerSpec{A: [][]float64{{0.5}}, B: [][]float64{{1}}, C: [][]float64{{1}}, D: [][]float64{{0}}, X0: []float64{0}}
	const sensorRef = 99.0 // a sensor reference no replay gives
	type ev struct {
		tick, version uint64
		updated       bool
	}
	record := func(tk uint64) *TickRecord {
		return &TickRecord{Tick: tk, Y: []float64{float64(tk)}, U: []float64{0}, UPlain: []float64{sensorRef}, Applied: true, Miss: tk == 4}
	}
	// A cluster holding the records of ticks, and what it hands its sink.
	newCluster := func(ticks ...uint64) (*Cluster, *[]TickRecord) {
		got := new([]TickRecord)
		c := &Cluster{opt: Options{Controller: spec, Log: slog.New(slog.DiscardHandler), Sink: func(r TickRecord) { *got = append(*got, r) }},
			records: map[uint64]*TickRecord{}, versions: stateVersions{by: map[uint64]uint64{}}, settle: settleState{follow: newFollower(spec)}}
		c.audit = [2]map[uint64]auditItem{{}, {}}
		for _, tk := range ticks {
			c.records[tk] = record(tk)
		}
		c.settle.started, c.settle.next = true, 1
		return c, got
	}
	report := func(c *Cluster, events []ev) {
		for _, e := range events {
			c.versions.on(e.tick, e.version, e.updated)
		}
	}
	// want is what Followed gives the same records with the same kept ticks.
	want := func(kept map[uint64]bool, ticks ...uint64) map[uint64]float64 {
		recs := make([]TickRecord, 0, len(ticks))
		for _, tk := range ticks {
			recs = append(recs, *record(tk))
		}
		if err := follow(spec, recs, kept); err != nil {
			t.Fatal(err)
		}
		w := map[uint64]float64{}
		for _, r := range recs {
			w[r.Tick] = r.UPlain[0]
		}
		return w
	}
	// check compares the records handed over, in tick order, with w; from
	// tick sensorFrom on (0: none) they keep the sensor's reference.
	check := func(name string, got []TickRecord, ticks []uint64, w map[uint64]float64, sensorFrom uint64) {
		t.Helper()
		if len(got) != len(ticks) {
			t.Fatalf("%s: %d records handed over, want %d", name, len(got), len(ticks))
		}
		for i, r := range got {
			exp := w[r.Tick]
			if sensorFrom > 0 && r.Tick >= sensorFrom {
				exp = sensorRef
			}
			if r.Tick != ticks[i] || r.UPlain[0] != exp {
				t.Errorf("%s: record %d, tick %d: u_plain %v, want tick %d's %v", name, i, r.Tick, r.UPlain, ticks[i], exp)
			}
		}
	}
	six := []uint64{1, 2, 3, 4, 5, 6}
	// Tick 3's update is rolled back when tick 4 misses; ticks 5 and 6 go on.
	events := []ev{{0, 0, false}, {1, 1, true}, {2, 2, true}, {3, 3, true}, {4, 2, false}, {5, 3, true}, {6, 4, true}}
	followed := want(map[uint64]bool{1: true, 2: true, 5: true, 6: true}, six...)

	c, got := newCluster(six...)
	report(c, events)
	c.settleBelow(4) // ticks 1-3, after the rollback
	c.Settle()
	if _, ferr, lost := c.Following(); ferr != nil || lost != nil {
		t.Fatal(errors.Join(ferr, lost))
	}
	check("rollback", *got, six, followed, 0)
	if maxDiff, _, _ := c.Following(); maxDiff != max(abs(followed[1]), abs(followed[2]), abs(followed[3]), abs(followed[5]), abs(followed[6])) {
		t.Errorf("Following: max |u - uplain| %v, want the followed ticks' (u is 0; tick 4 missed)", maxDiff)
	}
	if len(c.versions.by) != 0 || c.versions.taken != 4 {
		t.Errorf("after the run: %d versions still held, %d taken; want 0 and 4", len(c.versions.by), c.versions.taken)
	}

	// A jump in the tick numbers: only the ticks held are visited.
	jump := []uint64{1, 2, 5 * settleLag}
	c, got = newCluster(jump...)
	report(c, []ev{{0, 0, false}, {1, 1, true}, {2, 2, true}, {5 * settleLag, 3, true}})
	c.Settle()
	if _, ferr, lost := c.Following(); ferr != nil || lost != nil {
		t.Fatal(errors.Join(ferr, lost))
	}
	check("jump", *got, jump, want(map[uint64]bool{1: true, 2: true, 5 * settleLag: true}, jump...), 0)

	for _, tc := range []struct {
		name       string
		ticks      []uint64 // recorded
		audited    uint64   // a tick with an item audited but no record (0: none)
		events     []ev
		settleTo   uint64 // settleBelow before the events after the fourth (0: none)
		sensorFrom uint64
		why        string
	}{
		{"a rollback after the tick settled", six, 0, events, 4, 4, "state version 2 at tick 4 gives up the update of a tick already settled"},
		{"a kept tick not recorded", []uint64{1, 3, 4, 5, 6}, 2, events, 0, 2, "tick 2's update was kept but the tick not recorded"},
		// At a jump only the ticks held are visited: tick 2 is not.
		{"a kept tick not held", []uint64{1, 5 * settleLag}, 0, []ev{{0, 0, false}, {1, 1, true}, {2, 2, true}, {5 * settleLag, 3, true}}, 0, 5 * settleLag, "state version 2's tick 2 settled without it"},
		{"a version's tick never settled", six, 0, []ev{{0, 0, false}, {7, 1, true}}, 0, 0, "state version 1's tick 7 never settled"},
	} {
		c, got := newCluster(tc.ticks...)
		if tc.audited > 0 {
			c.audit[0][tc.audited] = auditItem{item: 1}
		}
		if tc.settleTo > 0 {
			report(c, tc.events[:4])
			c.settleBelow(tc.settleTo)
			report(c, tc.events[4:])
		} else {
			report(c, tc.events)
		}
		c.Settle()
		maxDiff, err, lost := c.Following()
		if err == nil || !strings.Contains(err.Error(), tc.why) || tc.sensorFrom > 0 && !strings.Contains(err.Error(), fmt.Sprintf("from tick %d on, uplain is the sensor's reference", tc.sensorFrom)) {
			t.Errorf("%s: FollowErr %v, want %q from tick %d", tc.name, err, tc.why, tc.sensorFrom)
		}
		if lost != nil {
			t.Errorf("%s: lost updates %v, want nil when the versions cannot be followed", tc.name, lost)
		}
		if tc.sensorFrom > 0 {
			check(tc.name, *got, tc.ticks, followed, tc.sensorFrom)
			// u is 0: |u - uplain| over the ticks before sensorFrom, in time.
			maxFollowed := 0.0
			for _, tk := range tc.ticks {
				if tk < tc.sensorFrom && tk != 4 {
					maxFollowed = max(maxFollowed, abs(followed[tk]))
				}
			}
			if maxDiff != maxFollowed {
				t.Errorf("%s: max |u - uplain| %v, want %v (the ticks followed only)", tc.name, maxDiff, maxFollowed)
			}
		}
		// Once failed, the versions are no longer recorded.
		cur := c.versions.cur
		c.versions.on(100, cur+1, true)
		if _, held := c.versions.by[cur+1]; held || c.versions.cur != cur {
			t.Errorf("%s: a version recorded after the failure", tc.name)
		}
	}

	// Ticks 3 and 4 without their updates kept and no miss: updates lost
	// unseen, refused once the run has settled.
	c, got = newCluster(six...)
	c.records[4].Miss = false
	report(c, events)
	c.Settle()
	_, ferr, lost := c.Following()
	if ferr != nil {
		t.Fatal(ferr)
	}
	if lost == nil || !strings.Contains(lost.Error(), "2 ticks applied in time without their update kept, more than the 0 missed ticks") {
		t.Fatalf("an update lost without a miss: %v", lost)
	}
	check("lost", *got, six, followed, 0)
}

func abs(x float64) float64 { return math.Abs(x) }
