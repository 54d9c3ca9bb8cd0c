// Package stall measures how late a sleeping goroutine wakes up. A stall of
// the process or of the machine (a vCPU the hypervisor did not run, CPU
// steal on a shared VM, a long pause) shows as a late wake-up, whatever else
// is running: `duet bench` records the stalls beside each scale step, and
// `duet stalls` measures a host (the end-to-end test runs it beside its
// steady phase, where a stall longer than the 30 ms deadline costs ticks).
package stall

import (
	"sync"
	"time"
)

// Period is the monitor's sleep: it wakes up once per Period when nothing
// stalls.
const Period = time.Millisecond

// Result is what a monitor saw.
type Result struct {
	Wakeups int           // wake-ups in all
	Count   int           // wake-ups more than the threshold late
	Worst   time.Duration // the latest wake-up's delay
	WorstAt time.Time     // when it woke up
}

// Monitor sleeps Period at a time on its own goroutine until End.
type Monitor struct {
	over  time.Duration
	sleep func(time.Duration)
	stop  chan struct{}
	once  sync.Once
	done  chan struct{}
	res   Result
}

// Start starts a monitor that counts wake-ups more than over late.
func Start(over time.Duration) *Monitor { return start(over, time.Sleep) }

func start(over time.Duration, sleep func(time.Duration)) *Monitor {
	m := &Monitor{over: over, sleep: sleep, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	return m
}

func (m *Monitor) run() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		default:
		}
		t := time.Now()
		m.sleep(Period)
		now := time.Now()
		late := now.Sub(t) - Period
		m.res.Wakeups++
		if late > m.over {
			m.res.Count++
		}
		if late > m.res.Worst {
			m.res.Worst, m.res.WorstAt = late, now
		}
	}
}

// End stops the monitor and returns what it saw; called again, it returns
// the same.
func (m *Monitor) End() Result {
	m.once.Do(func() { close(m.stop) })
	<-m.done
	return m.res
}
