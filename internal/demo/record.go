package demo

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/duet-mpc/duet/internal/actuator"
)

func (c *Cluster) rec(t uint64) *TickRecord {
	r := c.records[t]
	if r == nil {
		r = &TickRecord{Tick: t}
		c.records[t] = r
	}
	return r
}

func (c *Cluster) onTick(t uint64, y, uplain []float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rec(t)
	r.Y = append([]float64(nil), y...)
	r.UPlain = append([]float64(nil), uplain...)
}

func (c *Cluster) onApply(a actuator.Applied) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rec(a.Tick)
	r.U, r.Latency, r.Miss, r.Item0, r.Item1, r.Applied = a.U, a.Latency, a.Miss, a.Item0, a.Item1, true
}

func (c *Cluster) onAudit(id int, tick, item uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.used[id][item]; ok {
		c.reuse++
		c.opt.Log.Error("item reused", "party", id, "item", item, "ticks", fmt.Sprint(prev, ",", tick))
	}
	c.used[id][item] = tick
	c.audit[id][tick] = item
}

// Records returns the tick records in tick order.
func (c *Cluster) Records() []TickRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
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
	Mismatched int // ticks where P0 and P1 used different items
	Reused     int // items a party used twice
	OneSided   int // ticks only one party multiplied (abandoned)
}

// Audit checks the item ids used: the same on both sides, none twice.
func (c *Cluster) Audit() Audit {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := Audit{Reused: c.reuse}
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
	Ticks, Applied, Misses int
	P50, P99               time.Duration
	MaxDiff                float64 // max |u - uplain| over applied, non-missed ticks
}

// Summarize computes a summary of the records.
func Summarize(recs []TickRecord) Summary {
	var s Summary
	var lats []time.Duration
	for _, r := range recs {
		s.Ticks++
		if !r.Applied {
			continue
		}
		s.Applied++
		if r.Miss {
			s.Misses++
			continue
		}
		lats = append(lats, r.Latency)
		for i := range r.U {
			if i < len(r.UPlain) {
				s.MaxDiff = math.Max(s.MaxDiff, math.Abs(r.U[i]-r.UPlain[i]))
			}
		}
	}
	s.P50, s.P99 = Percentile(lats, 0.50), Percentile(lats, 0.99)
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
