package demo

import (
	"errors"
	"fmt"
	"slices"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// The sensor's plaintext reference (TickRecord.UPlain) takes a state update
// with every measurement it sends. The parties do not always: a tick they
// abandon leaves their state as it was, and a rollback gives the last
// update up (internal/party/tick.go). After such a tick the two are one
// update apart until the controller's dynamics let the difference decay,
// so |u − u_plain| may exceed the fixed-point bound on ticks that were
// themselves in time. Followed replays the reference over the recorded
// measurements taking only the updates the parties kept, so that a test
// can allow misses and still hold every other tick to the bound.

// stateVersions is what P0's Options.StateVersion reported.
type stateVersions struct {
	by  map[uint64]uint64 // version -> the tick whose update made it (the latest)
	cur uint64            // the state's version now
	// bad says why the versions cannot be followed, if they cannot.
	bad string
}

// on records that the state took version: after tick's update, or (not
// updated) as a party instance started or after a rollback.
func (v *stateVersions) on(tick, version uint64, updated bool) {
	switch {
	case updated && version != v.cur+1:
		v.fail(fmt.Sprintf("an update at tick %d to state version %d from %d", tick, version, v.cur))
	case updated:
		v.by[version] = tick
	case version+1 < v.cur:
		// More than the one update a rollback gives up: the state started
		// afresh, or a restore lost updates.
		v.fail(fmt.Sprintf("state version %d after %d (tick %d)", version, v.cur, tick))
	}
	// A version above cur without an update is a restore of an update
	// rolled back but not yet written again: by still holds its tick.
	v.cur = version
}

// fail records the first reason the versions cannot be followed.
func (v *stateVersions) fail(why string) {
	if v.bad == "" {
		v.bad = why
	}
}

// kept returns the ticks whose updates the state holds now.
func (v *stateVersions) kept() (map[uint64]bool, error) {
	if v.bad != "" {
		return nil, errors.New("demo: the state versions cannot be followed: " + v.bad)
	}
	k := make(map[uint64]bool, v.cur)
	for ver := uint64(1); ver <= v.cur; ver++ {
		t, ok := v.by[ver]
		if !ok {
			return nil, fmt.Errorf("demo: no tick made state version %d", ver)
		}
		k[t] = true
	}
	return k, nil
}

// Followed returns the tick records (as Records) with UPlain the float64
// controller's output replayed over the recorded measurements, from the
// state that P0's kept updates lead to: the ticks P0 abandoned, or whose
// update it rolled back, do not advance it. It is for one set-up's run
// without Options.Sink, with one instance of P0 at a time; where P0's
// versions cannot be followed (a second instance reporting, the state
// started afresh) it says so.
func (c *Cluster) Followed() ([]TickRecord, error) {
	if c.opt.Sink != nil {
		return nil, errors.New("demo: Followed needs every record; this cluster hands them to its Sink")
	}
	c.mu.Lock()
	recs := c.recordsLocked()
	kept, err := c.versions.kept()
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return recs, follow(c.opt.Controller, recs, kept)
}

// follow sets each record's UPlain to the float64 controller's output on its
// measurement, advancing the controller only on the kept ticks. The
// records are in tick order.
//
// A tick applied in time whose update was not kept was rolled back, and a
// rollback is found by a tick that misses (the state versions differ), so
// there are no more of them than missed ticks: more would be updates lost
// without a miss, which following P0 would otherwise hide.
func follow(spec mpc.ControllerSpec, recs []TickRecord, kept map[uint64]bool) error {
	fc := spec.NewFloatController()
	n, rolledBack, missed := 0, 0, 0
	for i := range recs {
		r := &recs[i]
		if r.Y == nil {
			if kept[r.Tick] {
				return fmt.Errorf("demo: tick %d's update was kept but its measurement not recorded", r.Tick)
			}
			continue
		}
		if !r.Applied || r.Miss {
			missed++
		}
		if kept[r.Tick] {
			r.UPlain = slices.Clone(fc.Step(r.Y))
			n++
		} else {
			r.UPlain = slices.Clone(fc.Output(r.Y))
			if r.Applied && !r.Miss {
				rolledBack++
			}
		}
	}
	if n != len(kept) {
		return fmt.Errorf("demo: %d kept updates, %d of them on recorded ticks", len(kept), n)
	}
	if rolledBack > missed {
		return fmt.Errorf("demo: %d ticks applied in time without their update kept, more than the %d missed ticks that would have found their rollbacks", rolledBack, missed)
	}
	return nil
}
