package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// The machine's own speed, measured at the start of every run (machine.csv)
// with nothing else of the bench running: one figure for its processor and
// one for a wake-up across its network stack. The VMs these results come
// from differ from day to day (the floor's p50 for the pendulum has been
// anything from 95 to 460 µs on the same code), and the ratios against the
// floor stay comparable where the absolute figures do not; these two say
// which of the machine's parts made the difference.
//
//   - MatVec: a 100 x 100 matrix times a vector over 2^127-1, the best of
//     machineMatVecs (what BenchmarkMatVec's d=100 times in pkg/mpc): the
//     processor's speed, with no system call or wake-up in it.
//   - RTT: a 64-byte round trip over loopback TCP between two goroutines,
//     one every millisecond so that both sides sleep in between as a tick's
//     goroutines do: the kernel's and the Go runtime's wake-ups, which the
//     floor's every hop pays, without NATS.

// MachineRow is the machine's speed at the start of a run.
type MachineRow struct {
	MatVec     time.Duration // best of machineMatVecs
	RTTs       int           // round trips timed
	RTTP50     time.Duration
	RTTP99     time.Duration
	RTTMin     time.Duration
	MatVecRuns int
}

const (
	machineMatVecs  = 200
	machineRTTGap   = time.Millisecond
	machineRTTBytes = 64
)

// measureMachine measures MachineRow with rtts round trips.
func measureMachine(ctx context.Context, rtts int) (MachineRow, error) {
	row := MachineRow{MatVecRuns: machineMatVecs}
	var err error
	if row.MatVec, err = bestMatVec(machineMatVecs); err != nil {
		return row, err
	}
	lat, err := loopbackRTTs(ctx, rtts, machineRTTGap)
	if err != nil {
		return row, err
	}
	st := Summarize(lat)
	row.RTTs, row.RTTMin, row.RTTP50, row.RTTP99 = st.N, st.Min, st.P50, st.P99
	return row, nil
}

// bestMatVec times n products of a random 100 x 100 matrix by a vector over
// 2^127-1 and returns the fastest.
func bestMatVec(n int) (time.Duration, error) {
	f, err := mpc.ParseModulus(mpc.PresetM127)
	if err != nil {
		return 0, err
	}
	const d = 100
	a, err := f.RandomMatrix(rand.Reader, d, d)
	if err != nil {
		return 0, err
	}
	v, err := f.RandomMatrix(rand.Reader, d, 1)
	if err != nil {
		return 0, err
	}
	dst := mpc.NewMatrix(d, 1)
	best := time.Duration(1<<63 - 1)
	for range n {
		t0 := time.Now()
		f.MatMul(dst, a, v)
		best = min(best, time.Since(t0))
	}
	return best, nil
}

// loopbackRTTs times n round trips of machineRTTBytes over a loopback TCP
// connection, gap apart.
func loopbackRTTs(ctx context.Context, n int, gap time.Duration) ([]time.Duration, error) {
	if n < 1 {
		return nil, fmt.Errorf("bench: machine: %d round trips, want at least 1", n)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: machine: loopback listener: %w", err)
	}
	defer ln.Close()
	echoed := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			echoed <- err
			return
		}
		defer c.Close()
		buf := make([]byte, machineRTTBytes)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				echoed <- err
				return
			}
			if _, err := c.Write(buf); err != nil {
				echoed <- err
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, fmt.Errorf("bench: machine: loopback dial: %w", err)
	}
	defer c.Close()
	buf := make([]byte, machineRTTBytes)
	lat := make([]time.Duration, 0, n)
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for len(lat) < n {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			return nil, fmt.Errorf("bench: machine: loopback write: %w", err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return nil, fmt.Errorf("bench: machine: loopback read: %w", err)
		}
		lat = append(lat, time.Since(t0))
	}
	c.Close() // the echo ends on EOF
	if err := <-echoed; err != nil {
		return nil, fmt.Errorf("bench: machine: loopback echo: %w", err)
	}
	return lat, nil
}

// String is the row for the bench's progress and summary.
func (m MachineRow) String() string {
	return fmt.Sprintf("a 100x100 matrix times a vector over 2^127-1 in %.1f µs (the best of %d); a loopback TCP round trip p50 %.1f µs, p99 %.1f µs, min %.1f µs (%d, one every %v)",
		us(m.MatVec), m.MatVecRuns, us(m.RTTP50), us(m.RTTP99), us(m.RTTMin), m.RTTs, machineRTTGap)
}
