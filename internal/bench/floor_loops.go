package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// floorLoops is the floor of the scale test: n concurrent loops ticking every
// period with the floor's topology and message sizes (FloorRig), no
// computation and no encryption, one connection per role for all loops (as
// the party services have). What it misses and its p99 are the machine's and
// the broker's, not the product's. With inProc they connect to the
// embedded server in process (inproc.go), as the scale step's services do
// with ScaleOptions.InProcess.
func floorLoops(ctx context.Context, url string, inProc nats.InProcessConnProvider, sz FloorSizes, n int, period, warmup, duration, deadline time.Duration) (r floorResult, err error) {
	var conns [4]*nats.Conn // sensor, p0, p1, actuator
	// The two relays play the parties: their connections and subscriptions
	// carry the parties' labels (roles.go), the sensor's and actuator's the
	// harness's.
	roles := [4]string{RoleHarness, RoleParty0, RoleParty1, RoleHarness}
	for i := range conns {
		withRole(ctx, roles[i], func(context.Context) {
			conns[i], err = nats.Connect(url, append(dialOptions(ctx, inProc), nats.Name(fmt.Sprintf("duet-floor-loops-%d", i)))...)
		})
		if err != nil {
			return r, err
		}
		defer conns[i].Close()
	}
	prefix := "floor." + uniqueTag()
	exch, out, meas := make([]byte, sz.Exchange), make([]byte, sz.Output), make([]byte, sz.Measure)
	// split returns loop and tick of prefix.<loop>.<kind>.<tick>.
	split := func(subj string) (string, string, bool) {
		parts := strings.Split(subj[len(prefix)+1:], ".")
		if len(parts) != 3 {
			return "", "", false
		}
		return parts[0], parts[2], true
	}
	for i := 0; i < 2; i++ {
		withRole(ctx, roles[1+i], func(context.Context) { err = floorRelay(conns[1+i], i, prefix, exch, out, split) })
		if err != nil {
			return r, err
		}
	}
	type tickState struct {
		start    time.Time
		measured bool
		outs     int
		lat      time.Duration
	}
	var mu sync.Mutex
	ticks := map[floorKey]*tickState{}
	if _, err := conns[3].Subscribe(prefix+".*.out.*", func(m *nats.Msg) {
		loop, tick, ok := split(m.Subject)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if ts := ticks[floorKey{loop, tick}]; ts != nil {
			ts.outs++
			if ts.outs == 2 {
				ts.lat = time.Since(ts.start)
			}
		}
	}); err != nil {
		return r, err
	}
	if err := conns[3].Flush(); err != nil {
		return r, err
	}
	start := time.Now()
	measureFrom, stopAt := start.Add(warmup), start.Add(warmup+duration)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * period / time.Duration(n))
			loop := strconv.Itoa(i)
			// Paced as the step's loops are (lightLoop.run).
			pc := newPacer(period)
			defer pc.stop()
			for t := 1; ; t++ {
				due, ok := pc.next(ctx)
				if !ok || due.After(stopAt) {
					return
				}
				tick := strconv.Itoa(t)
				mu.Lock()
				ticks[floorKey{loop, tick}] = &tickState{start: time.Now(), measured: !due.Before(measureFrom)}
				mu.Unlock()
				conns[0].Publish(prefix+"."+loop+".m0."+tick, meas)
				conns[0].Publish(prefix+"."+loop+".m1."+tick, meas)
			}
		}()
	}
	wg.Wait()
	time.Sleep(deadline + 100*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	r.All = len(ticks)
	for _, ts := range ticks {
		if !ts.measured {
			continue
		}
		r.Sent++
		if ts.outs < 2 || ts.lat > deadline {
			r.Misses++
			continue
		}
		r.Lat = append(r.Lat, ts.lat)
	}
	return r, ctx.Err()
}

// floorResult is what floorLoops measured: the latencies of the measured
// ticks answered within the deadline, the measured ticks sent and missed,
// and every tick sent (the warm-up's too).
type floorResult struct {
	Lat               []time.Duration
	Sent, Misses, All int
}

// floorKey is one tick of one loop of the floor.
type floorKey struct {
	loop string
	tick string
}

// floorRelay makes nc relay id of the floor: on a measurement it sends the
// exchange message to the other relay, and once it has both the measurement
// and the other relay's message it sends the output.
func floorRelay(nc *nats.Conn, id int, prefix string, exch, out []byte, split func(string) (string, string, bool)) error {
	var mu sync.Mutex
	got := map[floorKey]int{}
	step := func(k floorKey) {
		mu.Lock()
		got[k]++
		ready := got[k] == 2
		if ready {
			delete(got, k)
		}
		mu.Unlock()
		if ready {
			nc.Publish(prefix+"."+k.loop+".out."+k.tick, out)
		}
	}
	if _, err := nc.Subscribe(fmt.Sprintf("%s.*.m%d.*", prefix, id), func(m *nats.Msg) {
		if loop, tick, ok := split(m.Subject); ok {
			nc.Publish(fmt.Sprintf("%s.%s.x%d.%s", prefix, loop, 1-id, tick), exch)
			step(floorKey{loop, tick})
		}
	}); err != nil {
		return err
	}
	if _, err := nc.Subscribe(fmt.Sprintf("%s.*.x%d.*", prefix, id), func(m *nats.Msg) {
		if loop, tick, ok := split(m.Subject); ok {
			step(floorKey{loop, tick})
		}
	}); err != nil {
		return err
	}
	return nc.Flush()
}
