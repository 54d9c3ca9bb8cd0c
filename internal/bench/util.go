package bench

import (
	"syscall"
	"time"
)

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stallMonitor samples how late a goroutine sleeping 1 ms wakes up: a
// process or machine stall (CPU steal on a shared VM, a long GC pause) shows
// as a late wake-up, whatever the code under test is doing.
type stallMonitor struct {
	stop  chan struct{}
	done  chan struct{}
	count int           // wake-ups more than stallThreshold late
	worst time.Duration // the latest wake-up
}

const stallThreshold = 5 * time.Millisecond

func startStallMonitor() *stallMonitor {
	m := &stallMonitor{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			select {
			case <-m.stop:
				return
			default:
			}
			t := time.Now()
			time.Sleep(time.Millisecond)
			late := time.Since(t) - time.Millisecond
			if late > stallThreshold {
				m.count++
			}
			m.worst = max(m.worst, late)
		}
	}()
	return m
}

// end stops the monitor and returns the stalls seen and the worst one.
func (m *stallMonitor) end() (int, time.Duration) {
	close(m.stop)
	<-m.done
	return m.count, m.worst
}
