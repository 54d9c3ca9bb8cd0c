// Package bench measures the product on this machine: `duet bench`.
package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// FloorSizes are the payload sizes of one tick's messages.
type FloorSizes struct {
	Measure, Exchange, Output int
}

// Floor measures the zero-computation floor of one tick over NATS: the same
// topology as the secure loop (sensor -> both parties, one exchange between
// them, both -> actuator) and the same message sizes, with no computation
// and no encryption. It returns n latencies from the sensor's publish to the
// actuator's receipt of the second output message, ticks paced by gap.
func Floor(ctx context.Context, url string, sz FloorSizes, n int, gap time.Duration) ([]time.Duration, error) {
	conns := make([]*nats.Conn, 4) // sensor, p0, p1, actuator
	for i := range conns {
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("duet-floor-%d", i)))
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		conns[i] = nc
	}
	sensor, act := conns[0], conns[3]
	prefix := fmt.Sprintf("floor.%d", time.Now().UnixNano())
	meas, exch, out := make([]byte, sz.Measure), make([]byte, sz.Exchange), make([]byte, sz.Output)
	for i := 0; i < 2; i++ {
		nc, id := conns[1+i], i
		var mu sync.Mutex
		got := map[string]int{}
		step := func(tick string) {
			mu.Lock()
			got[tick]++
			done := got[tick] == 2
			if done {
				delete(got, tick)
			}
			mu.Unlock()
			if done {
				nc.Publish(prefix+".out."+tick, out)
			}
		}
		if _, err := nc.Subscribe(fmt.Sprintf("%s.m%d.*", prefix, id), func(m *nats.Msg) {
			tick := m.Subject[len(prefix)+4:]
			nc.Publish(fmt.Sprintf("%s.x%d.%s", prefix, 1-id, tick), exch)
			step(tick)
		}); err != nil {
			return nil, err
		}
		if _, err := nc.Subscribe(fmt.Sprintf("%s.x%d.*", prefix, id), func(m *nats.Msg) {
			step(m.Subject[len(prefix)+4:])
		}); err != nil {
			return nil, err
		}
		nc.Flush()
	}
	done := make(chan struct{}, 1)
	var outs sync.Map
	if _, err := act.Subscribe(prefix+".out.*", func(m *nats.Msg) {
		k := m.Subject
		if v, loaded := outs.LoadOrStore(k, 1); loaded && v.(int) == 1 {
			outs.Delete(k)
			done <- struct{}{}
		}
	}); err != nil {
		return nil, err
	}
	act.Flush()
	lat := make([]time.Duration, 0, n)
	for t := 0; t < n; t++ {
		tick := fmt.Sprint(t)
		start := time.Now()
		sensor.Publish(prefix+".m0."+tick, meas)
		sensor.Publish(prefix+".m1."+tick, meas)
		select {
		case <-done:
		case <-time.After(time.Second):
			return nil, fmt.Errorf("bench: floor tick %d timed out", t)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		lat = append(lat, time.Since(start))
		time.Sleep(gap)
	}
	return lat, nil
}
