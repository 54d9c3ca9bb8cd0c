package demo

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/duet-mpc/duet/internal/actuator"
	"github.com/duet-mpc/duet/pkg/codec"
)

// settleLag is how far behind the newest applied tick a tick is handed to
// Options.Sink: 1,024 ticks, 41 s at the pendulum's 25 Hz and about 4 s
// back to back with --fast (1 s with --two-hop=false), far more than any
// tick's deadline, so a tick's late events (a party's audit comes after its
// output share, so it can follow the actuator's reconstruction) have all
// arrived.
const settleLag = 1024

// liveWindow is how many of the latest applied, in-time ticks the live
// progress line takes its latency percentiles over.
const liveWindow = 1024

// liveStats is what the live progress line shows, kept as ticks are applied
// so that drawing it costs the same at tick 100 as at tick 1,000,000.
type liveStats struct {
	applied, misses int
	last            TickRecord // the latest applied tick
	lat             []time.Duration
	next            int // ring position in lat
}

func (l *liveStats) add(r *TickRecord) {
	l.applied++
	if r.Tick >= l.last.Tick {
		l.last = *r
	}
	if r.Miss {
		l.misses++
		return
	}
	if len(l.lat) < liveWindow {
		l.lat = append(l.lat, r.Latency)
		return
	}
	l.lat[l.next] = r.Latency
	l.next = (l.next + 1) % liveWindow
}

// settleState tracks what has been handed to Options.Sink.
type settleState struct {
	started bool
	next    uint64 // lowest tick not yet settled
	newest  uint64 // newest tick applied
	late    int    // events for ticks already settled (dropped)
	closed  bool   // Settle ran: the sink is not called again
	audit   Audit  // settled ticks' audit
	// follow replays the float64 controller over the settled ticks on
	// P0's kept updates (as Followed does for a test's whole run), until
	// followErr says why it cannot; lost is set by Settle if updates were
	// lost without a miss.
	follow    follower
	followErr error
	lost      error
	// followedMax is the largest |u - uplain| over the ticks applied in
	// time whose UPlain follow set.
	followedMax float64
}

// settled reports whether tick t was already handed to the sink (or Settle
// closed it): its events are then late.
func (c *Cluster) settled(t uint64) bool {
	return c.opt.Sink != nil && (c.settle.closed || c.settle.started && t < c.settle.next)
}

// rec returns tick t's record, or nil if t was already handed to the sink.
func (c *Cluster) rec(t uint64) *TickRecord {
	if c.opt.Sink != nil && !c.settle.started {
		c.settle.started, c.settle.next = true, t
	}
	if c.settled(t) {
		c.late(t)
		return nil
	}
	r := c.records[t]
	if r == nil {
		r = &TickRecord{Tick: t}
		c.records[t] = r
	}
	return r
}

func (c *Cluster) late(t uint64) {
	c.settle.late++
	c.opt.Log.Warn("demo: event for a tick already settled, dropped from the trace", "tick", t)
}

func (c *Cluster) onTick(t uint64, y, uplain []float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rec(t)
	if r == nil {
		return
	}
	r.Y = append([]float64(nil), y...)
	r.UPlain = append([]float64(nil), uplain...)
}

func (c *Cluster) onApply(a actuator.Applied) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rec(a.Tick)
	if r == nil {
		return
	}
	r.U, r.Latency, r.Miss, r.Item0, r.Item1, r.Applied = a.U, a.Latency, a.Miss, a.Item0, a.Item1, true
	c.live.add(r)
	if c.opt.Sink == nil {
		return
	}
	c.settle.newest = max(c.settle.newest, a.Tick)
	if c.settle.newest >= settleLag {
		c.settleBelow(c.settle.newest - settleLag + 1)
	}
}

// settleBelow settles every tick below limit, in tick order.
func (c *Cluster) settleBelow(limit uint64) {
	if limit <= c.settle.next {
		return
	}
	if limit-c.settle.next <= 4*settleLag {
		for ; c.settle.next < limit; c.settle.next++ {
			c.settleTick(c.settle.next)
		}
		return
	}
	// A jump in the tick numbers, or the end of the run: visit the ticks
	// held rather than every number in between.
	var ticks []uint64
	held := func(t uint64) {
		if t >= c.settle.next && t < limit {
			ticks = append(ticks, t)
		}
	}
	for t := range c.records {
		held(t)
	}
	for i := range c.audit {
		for t := range c.audit[i] {
			held(t)
		}
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i] < ticks[j] })
	for i, t := range ticks {
		if i == 0 || t != ticks[i-1] {
			c.settleTick(t)
		}
	}
	c.settle.next = limit
}

// settleTick hands tick t's record to the sink and folds its audit into
// the settled totals.
func (c *Cluster) settleTick(t uint64) {
	r := c.records[t]
	c.followSettled(t, r)
	if r != nil {
		delete(c.records, t)
		c.opt.Sink(*r)
	}
	i0, ok0 := c.audit[0][t]
	i1, ok1 := c.audit[1][t]
	delete(c.audit[0], t)
	delete(c.audit[1], t)
	switch {
	case ok0 && ok1:
		c.settle.audit.Ticks++
		if i0 != i1 {
			c.settle.audit.Mismatched++
		}
	case ok0 || ok1:
		c.settle.audit.OneSided++
	}
}

// Settle hands every remaining tick to Options.Sink, in tick order (no-op
// without a sink), and closes it: the sink is not called again, and every
// later event is dropped and counted (Late).
func (c *Cluster) Settle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opt.Sink == nil {
		return
	}
	limit := c.settle.next
	for t := range c.records {
		limit = max(limit, t+1)
	}
	for i := range c.audit {
		for t := range c.audit[i] {
			limit = max(limit, t+1)
		}
	}
	c.settle.started, c.settle.closed = true, true
	c.settleBelow(limit)
	s := &c.settle
	if s.followErr == nil && c.versions.taken < c.versions.cur {
		why := fmt.Sprintf("state version %d's tick %d never settled (uplain lacks its update)", c.versions.taken+1, c.versions.by[c.versions.taken+1])
		s.followErr = errors.New("demo: " + why)
		c.versions.fail(why)
	}
	if s.followErr == nil {
		s.lost = s.follow.check()
	}
}

// followSettled sets the UPlain of tick t, which is settling, to the float64
// controller's output stepped on P0's kept updates. From the first tick
// where P0's versions cannot be followed on, the records keep the sensor's
// reference, and Following says why.
func (c *Cluster) followSettled(t uint64, r *TickRecord) {
	s := &c.settle
	if s.followErr != nil {
		return
	}
	kept, err := c.versions.take(t)
	switch {
	case err != nil:
	case r != nil:
		err = s.follow.next(r, kept)
	case kept:
		err = fmt.Errorf("demo: tick %d's update was kept but the tick not recorded", t)
	}
	if err != nil {
		s.followErr = fmt.Errorf("demo: from tick %d on, uplain is the sensor's reference (%s)", t, strings.TrimPrefix(err.Error(), "demo: "))
		c.versions.fail(err.Error()) // stop recording versions
		return
	}
	if r != nil && r.Applied && !r.Miss {
		for i := range min(len(r.U), len(r.UPlain)) {
			s.followedMax = math.Max(s.followedMax, math.Abs(r.U[i]-r.UPlain[i]))
		}
	}
}

// Following says how the settled records' UPlain followed P0's kept
// updates (Options.Sink), final once Settle has run:
//   - followErr: why UPlain is not the float64 controller stepped on them
//     throughout, from the tick it names on (nil: it is);
//   - maxDiff: the largest |u - uplain| over the settled ticks applied in
//     time whose UPlain did follow them (all of them if followErr is nil);
//   - lost: an error if more ticks were applied in time without their
//     update kept than ticks missed (follower.check), state updates the
//     parties lost without a miss; nil while followErr is set, since then
//     the updates could not be counted.
func (c *Cluster) Following() (maxDiff float64, followErr, lost error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.settle
	return s.followedMax, s.followErr, s.lost
}

// Late is how many events arrived for ticks already handed to the sink.
func (c *Cluster) Late() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settle.late
}

// auditItem is the item a party used for a tick: its id (the stream
// sequence) and its serial.
type auditItem struct {
	item   uint64
	serial codec.Serial
}

func (c *Cluster) onAudit(id int, tick uint64, item auditItem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.used[id][item.serial]; ok {
		c.reuse++
		c.opt.Log.Error("item reused", "party", id, "item", item.item, "serial", fmt.Sprintf("%x", item.serial[:]), "ticks", fmt.Sprint(prev, ",", tick))
	}
	c.used[id][item.serial] = tick
	if c.settled(tick) {
		c.late(tick)
		return
	}
	c.audit[id][tick] = item
}

// Records returns the tick records in tick order (with Options.Sink, those
// not yet handed to it).
func (c *Cluster) Records() []TickRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.recordsLocked()
}

// recordsLocked is Records with c.mu held.
func (c *Cluster) recordsLocked() []TickRecord {
	out := make([]TickRecord, 0, len(c.records))
	for _, r := range c.records {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tick < out[j].Tick })
	return out
}

// Audit is the parties' item usage.
type Audit struct {
	Ticks      int // ticks on which both parties multiplied
	Mismatched int // ticks where P0 and P1 used different items (id or serial)
	Reused     int // items (serials) a party used twice
	OneSided   int // ticks only one party multiplied (abandoned)
}

// Audit checks the items used: the same id and serial on both sides, no
// serial twice.
func (c *Cluster) Audit() Audit {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.settle.audit
	a.Reused = c.reuse
	for t, i0 := range c.audit[0] {
		i1, ok := c.audit[1][t]
		if !ok {
			a.OneSided++
			continue
		}
		a.Ticks++
		if i0 != i1 {
			a.Mismatched++
		}
	}
	for t := range c.audit[1] {
		if _, ok := c.audit[0][t]; !ok {
			a.OneSided++
		}
	}
	return a
}

// Summary condenses a run.
type Summary struct {
	// Ticks recorded; Applied, those with an input applied; Misses, those
	// whose input applied was the fail-safe.
	Ticks, Applied, Misses int
	P50, P99               time.Duration
	MaxDiff                float64 // max |u - uplain| over applied, non-missed ticks
}

// Missed is the ticks not applied in time: the fail-safe applied (Misses),
// or no input at all, when a later tick was applied before the tick's
// deadline (possible with a deadline longer than the period), which the
// actuator counts in duet_deadline_misses_total too.
func (s Summary) Missed() int { return s.Ticks - (s.Applied - s.Misses) }

// Summarize computes a summary of the records.
func Summarize(recs []TickRecord) Summary {
	var sm summer
	for i := range recs {
		sm.add(&recs[i])
	}
	return sm.summary()
}

// summer builds a Summary one record at a time (keeping 8 bytes a tick,
// the latency, for the percentiles).
type summer struct {
	s    Summary
	lats []time.Duration
	tail int // the ticks since the last one applied (in flight at an interruption)
}

func (sm *summer) add(r *TickRecord) {
	s := &sm.s
	s.Ticks++
	if !r.Applied {
		sm.tail++
		return
	}
	sm.tail = 0
	s.Applied++
	if r.Miss {
		s.Misses++
		return
	}
	sm.lats = append(sm.lats, r.Latency)
	for i := range r.U {
		if i < len(r.UPlain) {
			s.MaxDiff = math.Max(s.MaxDiff, math.Abs(r.U[i]-r.UPlain[i]))
		}
	}
}

func (sm *summer) summary() Summary {
	s := sm.s
	s.P50, s.P99 = Percentile(sm.lats, 0.50), Percentile(sm.lats, 0.99)
	return s
}

// Percentile returns the q-quantile (nearest rank) of d.
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(math.Ceil(q*float64(len(s)))) - 1
	if k < 0 {
		k = 0
	}
	return s[k]
}
