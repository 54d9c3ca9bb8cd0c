package plantsvc

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/pkg/codec"
)

// countingPlant measures how many periods it has been advanced.
type countingPlant struct {
	mu    sync.Mutex
	steps int
}

func (p *countingPlant) Outputs() int { return 1 }
func (p *countingPlant) Inputs() int  { return 1 }
func (p *countingPlant) Measure() []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return []float64{float64(p.steps)}
}
func (p *countingPlant) Step([]float64) {
	p.mu.Lock()
	p.steps++
	p.mu.Unlock()
}

// TestLaterReadTakesOverAWaitingOne: a read waits for the previous tick's
// input up to Wait. When the sensor gives a read up first (its read timeout
// shorter than Wait) and reads the next tick, the later read takes over:
// the plant advances one period when the input comes, and answers the
// later read only. Before, the earlier read went on waiting and, the input
// taken by the later one, advanced the plant again with the last input held
// when its Wait ended, setting the last tick read back: two periods for one
// input (the test fails so: [3 2]).
func TestLaterReadTakesOverAWaitingOne(t *testing.T) {
	nc := natstest.Conn(t)
	sealers := testkeys.Sealers(t)
	pl := &countingPlant{}
	var mu sync.Mutex
	var stepped []uint64
	svc, err := New(nc, sealers[codec.RolePlant], Options{Loop: "loop1", Plant: pl, Wait: time.Second,
		OnStep: func(tick uint64, u, _ []float64) {
			if u != nil {
				mu.Lock()
				stepped = append(stepped, tick)
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	sensor, actuator := sealers[codec.RoleSensor], sealers[codec.RoleActuator]
	read := func(tick uint64, timeout time.Duration) (float64, error) {
		env, err := sensor.Seal(codec.Header{Kind: codec.KindPlantY, Loop: "loop1", Tick: tick, From: codec.RoleSensor, To: codec.RolePlant}, nil)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := nc.Request(bus.PlantYSubject("loop1"), env, timeout)
		if err != nil {
			return 0, err
		}
		_, body, err := sensor.Open(msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		var yp codec.PlantYPayload
		if err := codec.Unmarshal(body, &yp); err != nil {
			t.Fatal(err)
		}
		return yp.Y[0], nil
	}
	if y, err := read(1, time.Second); err != nil || y != 0 {
		t.Fatalf("the first read: y = %v, %v", y, err)
	}
	// Tick 1's input does not come: the sensor gives tick 2's read up after
	// 100 ms, and reads tick 3 while tick 2's read still waits.
	waitEnds := time.Now().Add(time.Second) // tick 2's read's Wait
	if _, err := read(2, 100*time.Millisecond); err != nats.ErrTimeout {
		t.Fatalf("tick 2's read: %v, want a timeout", err)
	}
	third := make(chan float64, 1)
	go func() {
		y, err := read(3, 800*time.Millisecond)
		if err != nil {
			t.Error(err)
		}
		third <- y
	}()
	time.Sleep(100 * time.Millisecond) // tick 3's read is waiting too
	body, err := codec.Marshal(codec.PlantUPayload{U: []float64{0.5}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := actuator.Seal(codec.Header{Kind: codec.KindPlantU, Loop: "loop1", Tick: 1, From: codec.RoleActuator, To: codec.RolePlant}, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(bus.PlantUSubject("loop1"), env); err != nil {
		t.Fatal(err)
	}
	if y := <-third; y != 1 {
		t.Errorf("tick 3's read: y = %v, want 1 (one period advanced)", y)
	}
	// Tick 2's read, had it gone on waiting, would advance the plant again
	// with the last input held when its Wait ends.
	time.Sleep(time.Until(waitEnds) + 300*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if steps := pl.Measure()[0]; steps != 1 || len(stepped) != 1 || stepped[0] != 3 {
		t.Fatalf("the plant advanced %v periods for one input, reads answered after an advance: %v; want 1, [3]", steps, stepped)
	}
}
