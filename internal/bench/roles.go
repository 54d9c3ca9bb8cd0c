package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// Where a loaded scale step's CPU goes, by service. The bench process holds
// the embedded NATS server, both parties and the harness (the sensors and
// actuators of every loop); in production each of these has its own
// machine. Every goroutine is labelled with its role (runtime/pprof labels,
// inherited by the goroutines it starts: a service's NATS connection's
// reader and flusher, a server client's read and write loops), and a CPU
// profile of the step splits the process's CPU by label. The collector's
// background marking has no label (its own column); an assist is charged to
// the goroutine that allocated, i.e. to its role. The NATS server labels
// its JetStream goroutines itself (account, stream, consumer), replacing
// the inherited label: those are the broker's too. Everything else (the
// scheduler, timers' goroutines, dealers, which are stopped before the
// measurement) is Other.

// roleLabel is the pprof label naming a goroutine's role.
const roleLabel = "duet-role"

// The roles.
const (
	RoleParty0  = "party0"
	RoleParty1  = "party1"
	RoleBroker  = "broker"
	RoleHarness = "harness"
	RoleDealer  = "dealer"
)

// withRole runs f with the calling goroutine labelled role; goroutines
// started meanwhile keep the label.
func withRole(ctx context.Context, role string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(roleLabel, role), f)
}

// RoleCPU is a step's CPU by role, in cores (CPU seconds per wall second
// of the profile). All NaN when it was not measured (another CPU profile
// was running).
type RoleCPU struct {
	Party            [2]float64
	Broker, Harness  float64
	Collector, Other float64
	// Sweep is the part of Collector that is the background sweeper
	// (runtime.bgsweep): the spans of the heap swept after a cycle's mark,
	// which runtime/metrics' GC CPU (GCCPU) does not count. The sweeping
	// done by allocating goroutines is in their roles.
	Sweep   float64
	Samples int
}

// Total is the sum over the roles.
func (c RoleCPU) Total() float64 {
	return c.Party[0] + c.Party[1] + c.Broker + c.Harness + c.Collector + c.Other
}

// Pair is the party pair's CPU (both parties).
func (c RoleCPU) Pair() float64 { return c.Party[0] + c.Party[1] }

// PairPerTick is the party pair's CPU per loop tick in microseconds (both
// parties together) with loops loops ticking every period; NaN if not
// measured.
func (c RoleCPU) PairPerTick(loops int, period time.Duration) float64 {
	if loops <= 0 {
		return math.NaN()
	}
	return c.Pair() * float64(period.Microseconds()) / float64(loops)
}

func unmeasuredRoles() RoleCPU {
	n := math.NaN()
	return RoleCPU{Party: [2]float64{n, n}, Broker: n, Harness: n, Collector: n, Other: n, Sweep: n}
}

// roleProfile is a CPU profile into memory.
type roleProfile struct {
	buf   bytes.Buffer
	start time.Time
	on    bool
}

// startRoleProfile starts a CPU profile; if another one is running the
// roles are not measured (stop returns NaN).
func startRoleProfile() *roleProfile {
	p := &roleProfile{start: time.Now()}
	p.on = pprof.StartCPUProfile(&p.buf) == nil
	return p
}

// stop ends the profile and returns the CPU by role and the profile itself
// (nil if none was taken).
func (p *roleProfile) stop() (RoleCPU, []byte, error) {
	if !p.on {
		return unmeasuredRoles(), nil, nil
	}
	pprof.StopCPUProfile()
	p.on = false
	wall := time.Since(p.start)
	c, err := cpuByRole(p.buf.Bytes(), wall)
	return c, p.buf.Bytes(), err
}

// cpuByRole splits a CPU profile's samples by role over wall.
func cpuByRole(raw []byte, wall time.Duration) (RoleCPU, error) {
	prof, err := profile.ParseData(raw)
	if err != nil {
		return unmeasuredRoles(), fmt.Errorf("bench: reading the step's CPU profile: %w", err)
	}
	vi := -1
	for i, st := range prof.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 || wall <= 0 {
		return unmeasuredRoles(), fmt.Errorf("bench: the step's CPU profile has no cpu/nanoseconds samples")
	}
	var c RoleCPU
	cores := func(ns int64) float64 { return float64(ns) / float64(wall) }
	for _, s := range prof.Sample {
		v := cores(s.Value[vi])
		c.Samples++
		role := ""
		if l := s.Label[roleLabel]; len(l) > 0 {
			role = l[0]
		} else if len(s.Label["account"]) > 0 || len(s.Label["stream"]) > 0 {
			// The NATS server replaces the labels of its streams' and
			// consumers' goroutines with its own (account, stream, ...).
			role = RoleBroker
		}
		switch role {
		case RoleParty0:
			c.Party[0] += v
		case RoleParty1:
			c.Party[1] += v
		case RoleBroker:
			c.Broker += v
		case RoleHarness:
			c.Harness += v
		default:
			if gc, sweep := inCollector(s); gc {
				c.Collector += v
				if sweep {
					c.Sweep += v
				}
			} else {
				c.Other += v
			}
		}
	}
	return c, nil
}

// inCollector reports whether an unlabelled sample is the collector's
// background work (marking, sweeping, scavenging), and whether it is the
// background sweeper's.
func inCollector(s *profile.Sample) (gc, sweep bool) {
	for _, loc := range s.Location {
		for _, ln := range loc.Line {
			if ln.Function == nil {
				continue
			}
			switch name := ln.Function.Name; {
			case name == "runtime.bgsweep":
				return true, true
			case name == "runtime.gcBgMarkWorker", name == "runtime.bgscavenge",
				strings.HasPrefix(name, "runtime.gcMarkTermination"), name == "runtime.gcStart":
				return true, false
			}
		}
	}
	return false, false
}
