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
// themselves in time. Followed (for a test's whole run) and followSettled
// (as the ticks settle, with Options.Sink: `duet demo`) replay the
// reference over the recorded measurements taking only the updates the
// parties kept, so that a run can allow misses and still hold every
// other tick to the bound.

// stateVersions is what P0's Options.StateVersion reported.
type stateVersions struct {
	by  map[uint64]uint64 // version -> the tick whose update made it (the latest)
	cur uint64            // the state's version now
	// taken is how many versions take has handed out (Options.Sink: their
	// ticks settled, their entries in by dropped).
	taken uint64
	// bad says why the versions cannot be followed, if they cannot.
	bad string
}

// on records that the state took version: after tick's update, or (not
// updated) as a party instance started or after a rollback.
func (v *stateVersions) on(tick, version uint64, updated bool) {
	if v.bad != "" {
		return // nothing more to follow (and with a Sink, by no longer shrinks)
	}
	switch {
	case updated && version != v.cur+1:
		v.fail(fmt.Sprintf("an update at tick %d to state version %d from %d", tick, version, v.cur))
	case updated:
		v.by[version] = tick
	case version+1 < v.cur:
		// More than the one update a rollback gives up: the state started
		// afresh, or a restore lost updates.
		v.fail(fmt.Sprintf("state version %d after %d (tick %d)", version, v.cur, tick))
	case version < v.taken:
		v.fail(fmt.Sprintf("state version %d at tick %d gives up the update of a tick already settled", version, tick))
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

// take reports whether the state holds tick t's update, for ticks taken
// in tick order as they settle (Options.Sink), normally long after the
// update and any rollback of it: the kept updates' ticks rise with their
// versions, so the next one to settle is that of the version after the
// last taken. A rollback of a taken update (a tick settled early, at a
// jump in the tick numbers or by Settle) makes the versions unfollowable
// (on).
func (v *stateVersions) take(t uint64) (bool, error) {
	if v.bad == "" && v.taken < v.cur {
		next, ok := v.by[v.taken+1]
		switch {
		case !ok:
			v.fail(fmt.Sprintf("no tick made state version %d", v.taken+1))
		case next < t:
			v.fail(fmt.Sprintf("state version %d's tick %d settled without it (not recorded, or the version restored after the tick settled)", v.taken+1, next))
		case next > t:
			return false, nil
		default:
			v.taken++
			delete(v.by, v.taken)
			return true, nil
		}
	}
	if v.bad != "" {
		return false, errors.New("demo: the state versions cannot be followed: " + v.bad)
	}
	return false, nil
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
func follow(spec mpc.ControllerSpec, recs []TickRecord, kept map[uint64]bool) error {
	f := newFollower(spec)
	for i := range recs {
		if err := f.next(&recs[i], kept[recs[i].Tick]); err != nil {
			return err
		}
	}
	if f.steps != len(kept) {
		return fmt.Errorf("demo: %d kept updates, %d of them on recorded ticks", len(kept), f.steps)
	}
	return f.check()
}

// follower steps the float64 controller over tick records in tick order,
// advancing it only on the ticks whose updates were kept.
type follower struct {
	fc                        *mpc.FloatController
	steps, rolledBack, missed int
}

func newFollower(spec mpc.ControllerSpec) follower {
	return follower{fc: spec.NewFloatController()}
}

// next sets r.UPlain to the controller's output on r's measurement, and
// advances the controller if r's update was kept.
func (f *follower) next(r *TickRecord, kept bool) error {
	if r.Y == nil {
		if kept {
			return fmt.Errorf("demo: tick %d's update was kept but its measurement not recorded", r.Tick)
		}
		return nil
	}
	if !r.Applied || r.Miss {
		f.missed++
	}
	if kept {
		r.UPlain = slices.Clone(f.fc.Step(r.Y))
		f.steps++
		return nil
	}
	r.UPlain = slices.Clone(f.fc.Output(r.Y))
	if r.Applied && !r.Miss {
		f.rolledBack++
	}
	return nil
}

// check refuses more ticks applied in time without their update kept than
// missed ticks. Such a tick was rolled back, and a rollback is found by a
// tick that misses (the state versions differ): more would be updates lost
// without a miss, which following P0 would otherwise hide.
func (f *follower) check() error {
	if f.rolledBack > f.missed {
		return fmt.Errorf("demo: %d ticks applied in time without their update kept, more than the %d missed ticks that would have found their rollbacks", f.rolledBack, f.missed)
	}
	return nil
}
