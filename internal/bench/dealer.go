package bench

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/internal/sensor"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// Dealer throughput: real internal/dealer replicas (each on its own NATS
// connection) fill a loop's real offline queue (JetStream, memory storage,
// interest retention with both parties' consumers, nobody consuming). The
// rate is read from the stream's depth: items per second between 10% and
// 90% of the target, so start-up (the watch of the set-up records,
// registration) is not counted. With three replicas the stream's MaxMsgs
// stops the overfill, as in production.

// DealerCase is a controller whose items are generated.
type DealerCase struct {
	Name       string
	Controller mpc.ControllerSpec
}

// DealerOptions configure RunDealer.
type DealerOptions struct {
	URL      string
	Items    int   // target queue depth per measurement (fewer for large items)
	MaxBytes int64 // cap on a filled queue's size in bytes (default 64 MiB)
	Replicas []int // default 1 and 3
	Variants []mpc.Variant
	Compress []bool
	// PerMsg are the sensor's items per stream message (default 8 and 1).
	PerMsg []int
	Log    *slog.Logger
}

// DealerRow is one measurement.
type DealerRow struct {
	Case     string
	Variant  mpc.Variant
	Compress bool
	Replicas int
	// PerMsg is the items each stream message held (the set-up's, lowered by
	// the dealer for large items).
	PerMsg  int
	Items   int     // queue depth reached
	Seconds float64 // from 10% to 90% of Items
	Rate    float64 // items per second
	// PayloadBytes is mpc.DealerBytesPerTick: the material a dealer ships per
	// tick before sealing and framing.
	PayloadBytes int
	// StreamBytes is the measured JetStream bytes per item (sealed envelopes,
	// msgpack framing, subject and stream overhead, shared by a message's
	// items).
	StreamBytes float64
}

// RunDealer measures every case, variant, compression and replica count.
func RunDealer(ctx context.Context, opt DealerOptions, cases []DealerCase) ([]DealerRow, error) {
	if opt.Items <= 0 {
		opt.Items = 5000
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = 64 << 20
	}
	if len(opt.Replicas) == 0 {
		opt.Replicas = []int{1, 3}
	}
	if len(opt.Variants) == 0 {
		opt.Variants = []mpc.Variant{mpc.PerTick, mpc.FixedMask}
	}
	if len(opt.Compress) == 0 {
		opt.Compress = []bool{true, false}
	}
	if len(opt.PerMsg) == 0 {
		opt.PerMsg = []int{sensor.DefaultItemsPerMsg, 1}
	}
	var rows []DealerRow
	for _, c := range cases {
		for _, v := range opt.Variants {
			for _, comp := range opt.Compress {
				for _, pm := range opt.PerMsg {
					for _, k := range opt.Replicas {
						row, err := runDealerPoint(ctx, opt, c, v, comp, k, pm)
						if err != nil {
							return rows, fmt.Errorf("bench: dealer %s %s compress=%v replicas=%d items/message=%d: %w", c.Name, v, comp, k, pm, err)
						}
						rows = append(rows, row)
					}
				}
			}
		}
	}
	return rows, nil
}

func runDealerPoint(ctx context.Context, opt DealerOptions, c DealerCase, v mpc.Variant, compress bool, replicas, perMsg int) (DealerRow, error) {
	row := DealerRow{Case: c.Name, Variant: v, Compress: compress, Replicas: replicas}
	rz, err := c.Controller.Resolve(v)
	if err != nil {
		return row, err
	}
	row.PayloadBytes = mpc.DealerBytesPerTick(rz.Params, compress)
	// Not quiesced: a dealer runs with its memory mapped (see quiesce).
	// Envelope, framing and stream overhead: a few hundred bytes per item.
	est := int64(row.PayloadBytes) + 512
	n := int(min(int64(opt.Items), opt.MaxBytes/est))
	n = max(n, 50)
	r, err := newRig(ctx, opt.URL, opt.Log)
	if err != nil {
		return row, err
	}
	defer r.close()
	loop := "b" + uniqueTag() // 7 characters, like "pendulum": ids travel in every header
	if _, err := r.setupLoop(r.admin, loopSpec{Loop: loop, Controller: c.Controller, Variant: v, Compress: compress, QueueMax: int64(n), ItemsPerMsg: perMsg}); err != nil {
		return row, err
	}
	stop, err := r.startDealers(replicas, dealer.Options{LowWater: n, Poll: 10 * time.Millisecond})
	if err != nil {
		return row, err
	}
	defer stop()
	// Every message holds the same number of items (the dealer lowers the
	// set-up's number once, for large items): read it from the first.
	var k int
	if err := waitFor(ctx, time.Minute, "the first stream message", func() bool {
		k, err = storedPerMsg(ctx, r, loop)
		return err == nil
	}); err != nil {
		return row, err
	}
	row.PerMsg = k
	// Depths and positions below are in stream messages.
	msgs := n / k
	lo, hi := msgs/10, msgs*9/10
	var depth uint64
	var tLo, tHi time.Time // polled, a fallback for the stored times
	deadline := time.Now().Add(5 * time.Minute)
	var lastErr error // of the last depth check that failed
	// Until message hi (counted from 0) is stored: storedTimes reads it.
	for int(depth) <= hi {
		if err := ctx.Err(); err != nil {
			return row, err
		}
		if time.Now().After(deadline) {
			return row, fmt.Errorf("bench: the queue did not reach %d messages of %d items (depth %d; last failed check: %v)", hi+1, k, depth, lastErr)
		}
		time.Sleep(2 * time.Millisecond)
		d, _, err := r.queueDepth(ctx, loop)
		if err != nil {
			lastErr = err
			continue
		}
		depth = d
		if tLo.IsZero() && int(depth) > lo {
			tLo = time.Now()
		}
	}
	tHi = time.Now()
	stop()
	row.Items = msgs * k
	// The rate comes from the times the server stored messages lo and hi,
	// not from polling (the queue can fill between two polls).
	if t0, t1, err := storedTimes(ctx, r, loop, lo, hi); err == nil {
		tLo, tHi = t0, t1
	} else {
		r.log.Warn("stored item times unavailable; using polled times", "loop", loop, "err", err)
	}
	row.Seconds = tHi.Sub(tLo).Seconds()
	if row.Seconds > 0 {
		row.Rate = float64((hi-lo)*k) / row.Seconds
	}
	if depth, bytes, err := r.queueDepth(ctx, loop); err == nil && depth > 0 {
		row.StreamBytes = float64(bytes) / float64(depth) / float64(k)
	}
	return row, nil
}

// storedPerMsg is the number of items in the first message of a loop's
// queue.
func storedPerMsg(ctx context.Context, r *rig, loop string) (int, error) {
	st, err := r.js.Stream(ctx, bus.OfflineStream(loop))
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	if info.State.Msgs == 0 {
		return 0, fmt.Errorf("empty queue")
	}
	m, err := st.GetMsg(ctx, info.State.FirstSeq)
	if err != nil {
		return 0, err
	}
	its, err := codec.PeekItems(m.Data, codec.MaxItemsPerMsg)
	return len(its), err
}

// storedTimes returns the times the server stored messages lo and hi of a
// loop's queue, counted from 0.
func storedTimes(ctx context.Context, r *rig, loop string, lo, hi int) (time.Time, time.Time, error) {
	st, err := r.js.Stream(ctx, bus.OfflineStream(loop))
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	mLo, err := st.GetMsg(ctx, info.State.FirstSeq+uint64(lo))
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("item %d of %d..%d: %w", lo, info.State.FirstSeq, info.State.LastSeq, err)
	}
	mHi, err := st.GetMsg(ctx, info.State.FirstSeq+uint64(hi))
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("item %d of %d..%d: %w", hi, info.State.FirstSeq, info.State.LastSeq, err)
	}
	return mLo.Time, mHi.Time, nil
}
