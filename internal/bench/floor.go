// Package bench measures the product on this machine: `duet bench`.
//
// Every measurement runs beside a zero-computation floor on the same NATS
// server in the same run (floor.go): the machines this runs on are shared
// and noisy, so the ratio to the floor is the number to read, not the
// absolute latency.
package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// FloorSizes are the payload sizes of one tick's messages.
type FloorSizes struct {
	Measure, Exchange, Output int
	// OneWay selects the topology of Protocol 2: only P0 sends an exchange
	// message (to P1); P0 answers at once, P1 after P0's message. Otherwise
	// both parties exchange one message each (Protocol 1, a controller tick).
	OneWay bool
	// TwoHop is the two-hop tick's topology: no exchange between the
	// measurement and the outputs (the parties exchanged between ticks);
	// each party answers its measurement at once.
	TwoHop bool
	// PlantRequest and PlantReply, if PlantRequest > 0, are the sizes of
	// the sensor's plant read before each tick (request/reply): the floor's
	// sensor asks a plant of its own first and starts the clock on the
	// reply, as the sensor service reads the plant and then stamps and
	// sends the tick. The read wakes the sensor, the server and their
	// threads just before the tick, which makes a tick that follows it
	// faster than one sent from idle; a floor without it is not a lower
	// bound for such a tick.
	PlantRequest, PlantReply int
}

// loopSizes are the sealed message sizes of one tick of cs's loops in
// variant v.
func loopSizes(cs mpc.ControllerSpec, v mpc.Variant) (FloorSizes, error) {
	rz, err := cs.Resolve(v)
	if err != nil {
		return FloorSizes{}, err
	}
	ids, err := newIdentities()
	if err != nil {
		return FloorSizes{}, err
	}
	return envelopeSizes(ids, "s"+uniqueTag()+"-0", rz.Params)
}

// envelopeSizes seals one tick's measurement, Protocol 1 message and output
// share of a loop, for a floor with the same message sizes.
func envelopeSizes(ids *identities, loop string, prm mpc.Params) (FloorSizes, error) {
	f := prm.Field
	r, c := prm.PhiShape()
	const tick, item = 1000, 100000 // typical magnitudes: msgpack integers are compact
	sz := FloorSizes{}
	seal := func(from, to codec.Role, kind codec.Kind, payload any) (int, error) {
		s, err := ids.sealer(from)
		if err != nil {
			return 0, err
		}
		body, err := codec.Marshal(payload)
		if err != nil {
			return 0, err
		}
		env, err := s.Seal(codec.Header{Kind: kind, Loop: loop, Tick: tick, From: from, To: to}, body)
		return len(env), err
	}
	var err error
	if sz.Measure, err = seal(codec.RoleSensor, codec.RoleParty0, codec.KindMeasure,
		codec.MeasurePayload{Y: codec.PutMatrix(f, mpc.NewMatrix(prm.P, 1)), SentUnixNano: time.Now().UnixNano()}); err != nil {
		return sz, err
	}
	mul := codec.MulPayload{Item: item, Version: tick, T: codec.PutMatrix(f, mpc.NewMatrix(c, 1))}
	if prm.Variant == mpc.PerTick {
		mul.S = codec.PutMatrix(f, mpc.NewMatrix(r, c))
	}
	if sz.Exchange, err = seal(codec.RoleParty0, codec.RoleParty1, codec.KindMul, mul); err != nil {
		return sz, err
	}
	sz.Output, err = seal(codec.RoleParty0, codec.RoleActuator, codec.KindOutput, codec.OutputPayload{Item: item, U: codec.PutMatrix(f, mpc.NewMatrix(prm.M, 1))})
	return sz, err
}

// FloorRig is the zero-computation floor of one tick over NATS: the same
// topology as the secure loop (sensor -> both parties, one exchange between
// them, both -> actuator) and the same message sizes, with no computation
// and no encryption. Each of the four roles (five with the plant read) has
// its own connection, as the services do.
type FloorRig struct {
	conns    [5]*nats.Conn // sensor, p0, p1, actuator, plant (PlantRequest > 0)
	prefix   string
	meas     []byte
	plantReq []byte         // the plant read's request (nil: no plant read)
	done     chan floorDone // ticks whose second output arrived
	tick     uint64         // last tick sent (Run is not safe for concurrent use)
	relays   []*relayProc   // the relays' processes (NewFloorRigRelays)
}

// NewFloorRig connects the four roles (five with the plant read) to url and
// subscribes the parties, the actuator and the plant.
func NewFloorRig(url string, sz FloorSizes) (*FloorRig, error) {
	return newFloorRig(url, sz, false)
}

// NewFloorRigRelays is NewFloorRig with the parties' relays each in a
// process of its own (floor_relay.go), beside parties that run as
// processes: the floor of the same shape.
func NewFloorRigRelays(url string, sz FloorSizes) (*FloorRig, error) {
	return newFloorRig(url, sz, true)
}

func newFloorRig(url string, sz FloorSizes, relayProcs bool) (*FloorRig, error) {
	r := &FloorRig{prefix: fmt.Sprintf("floor.%d", time.Now().UnixNano()), meas: make([]byte, sz.Measure), done: make(chan floorDone, 16)}
	roles := len(r.conns) - 1
	if sz.PlantRequest > 0 {
		roles++
		r.plantReq = make([]byte, sz.PlantRequest)
	}
	for i := range roles {
		if relayProcs && (i == 1 || i == 2) {
			continue // the relays connect from their processes
		}
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("duet-floor-%d", i)))
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("bench: floor: %w", err)
		}
		r.conns[i] = nc
	}
	for i := 0; i < 2; i++ {
		if relayProcs {
			p, err := startRelay(url, r.prefix, i, sz)
			if err != nil {
				r.Close()
				return nil, err
			}
			r.relays = append(r.relays, p)
			continue
		}
		if err := subscribeRelay(r.conns[1+i], r.prefix, i, sz); err != nil {
			r.Close()
			return nil, err
		}
	}
	if plant := r.conns[4]; plant != nil {
		reply := make([]byte, sz.PlantReply)
		if _, err := plant.Subscribe(r.prefix+".plant", func(m *nats.Msg) { _ = m.Respond(reply) }); err != nil {
			r.Close()
			return nil, err
		}
		if err := plant.Flush(); err != nil {
			r.Close()
			return nil, err
		}
	}
	act := r.conns[3]
	outs := map[string]bool{}
	if _, err := act.Subscribe(r.prefix+".out.*", func(m *nats.Msg) {
		at := time.Now() // stamped here, as the actuator stamps a tick
		tick := m.Subject[len(r.prefix)+5:]
		if !outs[tick] { // the callback is never run concurrently with itself
			outs[tick] = true
			return
		}
		delete(outs, tick)
		if t, err := strconv.ParseUint(tick, 10, 64); err == nil {
			select {
			case r.done <- floorDone{t, at}:
			default:
			}
		}
	}); err != nil {
		r.Close()
		return nil, err
	}
	if err := act.Flush(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// subscribeRelay makes nc party id's zero-computation relay of the floor
// with subjects under prefix: it answers its measurement (and, but in two
// hops, the other party's exchange message) with an output message, and
// sends the other party an exchange message on its measurement.
func subscribeRelay(nc *nats.Conn, prefix string, id int, sz FloorSizes) error {
	exch, out := make([]byte, sz.Exchange), make([]byte, sz.Output)
	var mu sync.Mutex
	got := map[string]int{}
	// need is how many messages party id waits for before answering.
	need := 2
	if sz.OneWay && id == 0 || sz.TwoHop {
		need = 1
	}
	step := func(tick string) {
		mu.Lock()
		got[tick]++
		ready := got[tick] == need
		if ready {
			delete(got, tick)
		}
		mu.Unlock()
		if ready {
			nc.Publish(prefix+".out."+tick, out)
		}
	}
	// One subscription (one goroutine) per party for the measurement and
	// the exchange, as the party service's single inbox per loop.
	own := fmt.Sprintf("%s.p%d.", prefix, id)
	peerX := fmt.Sprintf("%s.p%d.x.", prefix, 1-id)
	if _, err := nc.Subscribe(own+"*.*", func(m *nats.Msg) {
		rest := m.Subject[len(own):] // "m.<tick>" or "x.<tick>"
		if len(rest) < 3 {
			return
		}
		tick := rest[2:]
		if rest[0] == 'm' && !sz.TwoHop && (!sz.OneWay || id == 0) {
			nc.Publish(peerX+tick, exch)
		}
		step(tick)
	}); err != nil {
		return err
	}
	return nc.Flush()
}

// floorDone is a completed floor tick and when its second output arrived.
type floorDone struct {
	tick uint64
	at   time.Time
}

// Run returns n latencies from the sensor's publish to the actuator's receipt
// of the second output message, ticks paced by gap (with the plant read, the
// clock starts when its reply is in). Tick numbers continue across calls.
func (r *FloorRig) Run(ctx context.Context, n int, gap time.Duration) ([]time.Duration, error) {
	sensor := r.conns[0]
	lat := make([]time.Duration, 0, n)
	timeout := time.NewTimer(time.Hour)
	defer timeout.Stop()
	for i := 0; i < n; i++ {
		r.tick++
		t := r.tick
		tick := strconv.FormatUint(t, 10)
		if r.plantReq != nil {
			if _, err := sensor.Request(r.prefix+".plant", r.plantReq, time.Second); err != nil {
				return nil, fmt.Errorf("bench: floor tick %d: plant read: %w", t, err)
			}
		}
		start := time.Now()
		sensor.Publish(r.prefix+".p0.m."+tick, r.meas)
		sensor.Publish(r.prefix+".p1.m."+tick, r.meas)
		timeout.Reset(time.Second)
		var end time.Time
	wait:
		for {
			select {
			case got := <-r.done:
				if got.tick == t {
					end = got.at
					break wait
				}
			case <-timeout.C:
				return nil, fmt.Errorf("bench: floor tick %d timed out", t)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		lat = append(lat, end.Sub(start))
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	return lat, nil
}

// Close closes the connections and stops the relays' processes.
func (r *FloorRig) Close() {
	for _, nc := range r.conns {
		if nc != nil {
			nc.Close()
		}
	}
	for _, p := range r.relays {
		p.stop()
	}
	r.relays = nil
}

// Floor measures n floor ticks with a fresh rig (see FloorRig).
func Floor(ctx context.Context, url string, sz FloorSizes, n int, gap time.Duration) ([]time.Duration, error) {
	r, err := NewFloorRig(url, sz)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Run(ctx, n, gap)
}
