// Package dealer pre-generates matrix triples and truncation masks into each
// loop's offline JetStream queue. Any number of replicas may run: they learn
// the loops from the sensor's sealed records in the set-up KV bucket, keep
// each queue above its low-water mark, and rely on the stream (MaxMsgs with
// DiscardNew) to stop overfilling when several publish at once.
package dealer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// Options configure a dealer replica.
type Options struct {
	Name     string        // replica name for logs
	LowWater int           // refill when the queue holds fewer items than this
	Batch    int           // items published per refill round
	Poll     time.Duration // shortest interval between a queue's depth checks
	PollMax  time.Duration // longest (0: one second, or Poll if longer)
	Log      *slog.Logger
	Metrics  *metrics.Set
}

// Dealer is one replica.
type Dealer struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	sealer *codec.Sealer
	opt    Options
	// watching: Run has found the set-up bucket and watches it (Ready).
	watching atomic.Bool

	mu    sync.Mutex
	loops map[string]context.CancelFunc
	epoch map[string]uint64
	keys  map[string]string // set-up record key -> its loop

	// denied receives the server's refusal of a pull of the dealer's
	// set-up records, which reaches the connection's asynchronous error
	// handler only (noteAsyncError): the ordered consumer would otherwise
	// be created again and again, the dealer serving nothing.
	denied chan error
}

// New returns a dealer replica.
func New(nc *nats.Conn, sealer *codec.Sealer, opt Options) (*Dealer, error) {
	if sealer.Self() != codec.RoleDealer {
		return nil, fmt.Errorf("dealer: sealer is for %s", sealer.Self())
	}
	if opt.LowWater <= 0 {
		opt.LowWater = 750 // 30 s of 40 ms ticks
	}
	if opt.Batch <= 0 {
		opt.Batch = 64
	}
	if opt.Poll <= 0 {
		opt.Poll = 50 * time.Millisecond
	}
	if opt.PollMax <= 0 {
		opt.PollMax = time.Second
	}
	opt.PollMax = max(opt.PollMax, opt.Poll)
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Metrics == nil {
		opt.Metrics = metrics.New("dealer")
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	d := &Dealer{nc: nc, js: js, sealer: sealer, opt: opt, loops: map[string]context.CancelFunc{}, epoch: map[string]uint64{}, keys: map[string]string{}, denied: make(chan error, 1)}
	// The connection's own handler (bus.Connect's log, the metrics) runs
	// first. Not safe against another New on the same connection at the
	// same time: each dealer has a connection of its own.
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		if prev != nil {
			prev(c, sub, err)
		}
		d.noteAsyncError(err)
	})
	return d, nil
}

// noteAsyncError passes a refusal of the pull of the dealer's set-up
// records on to Run. A NATS server whose permissions come from an earlier
// release's nats-auth.conf lets the dealer create its filtered consumer but
// not pull from it.
func (d *Dealer) noteAsyncError(err error) {
	if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), "CONSUMER.MSG.NEXT."+bus.SetupStream+".") {
		select {
		case d.denied <- err:
		default:
		}
	}
}

// Run watches the set-up bucket for loops and serves them until ctx ends.
func (d *Dealer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer d.watching.Store(false)
	// The loops' generators run under ctx: Run returning for another
	// reason (the watch failed) stops them before waiting for them.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for first := true; ; first = false {
		// At the start, and after a recreated bucket: a bucket not there
		// (yet, or deleted again), or JetStream not yet back, is waited for
		// rather than taken as the watch failing.
		d.watching.Store(false)
		if _, err := bus.WaitSetupBucket(ctx, d.js, d.opt.Log); err != nil {
			return nil
		}
		d.watching.Store(true)
		if first {
			select { // a refusal of an earlier Run's watch, which came after it ended
			case <-d.denied:
			default:
			}
		}
		again, err := d.watch(ctx, &wg, !first)
		if err != nil || !again {
			return err
		}
		d.opt.Log.Warn("dealer: the set-up bucket was recreated (a NATS server restarted on memory storage, or the bucket deleted): watching its records afresh", "dealer", d.opt.Name)
	}
}

// Ready reports whether the dealer watches the set-up bucket (/readyz): not
// while it waits for the bucket (not made yet, or JetStream not back).
func (d *Dealer) Ready() bool { return d.watching.Load() }

// recreateCheck is how often the watch looks up the set-up stream's
// creation time (a variable for the tests).
var recreateCheck = 5 * time.Second

// watch registers the loops of the set-up records as they come, until ctx
// ends (false, nil), the watch fails or its pull is refused (the error), or
// the set-up stream is found recreated (true, nil): watched afresh then,
// with afresh set, and the loops whose records the recreated bucket does
// not hold are no longer served (dropUnlisted).
// The ordered consumer under the watch follows a stream deleted and created
// again from the stream sequence it had reached, and a record written to
// the new stream below that sequence (a new set-up's records, written in
// the same order as before) would never come: the loop's generator of the
// earlier epoch would go on filling the queue with items both parties
// refuse.
func (d *Dealer) watch(ctx context.Context, wg *sync.WaitGroup, afresh bool) (again bool, err error) {
	created, err := d.setupCreated(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, fmt.Errorf("dealer: watch set-up: %w", err)
	}
	records, err := d.watchRecords(ctx)
	if err != nil {
		return false, fmt.Errorf("dealer: watch set-up: %w", err)
	}
	stop := context.AfterFunc(ctx, records.Stop)
	defer stop()
	defer records.Stop()
	if afresh {
		// After the watch has begun: a record written from now on comes
		// through it, and serves its loop again if it was dropped here.
		d.dropUnlisted(ctx)
	}
	// wctx ends the wait for the next record too: a Stop that comes while
	// the ordered consumer resets itself can be undone by the reset, which
	// installs its new subscription after it.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	// A refused pull stops the watch, and Run returns saying why, so that
	// the dealer is restarted and its log names the remedy, rather than
	// staying up and ready with no loop served.
	deniedErr := make(chan error, 1)
	recreated := make(chan struct{}, 1)
	every := recreateCheck // read here, not in the goroutine, which Run does not wait for
	go func() {
		check := time.NewTicker(every)
		defer check.Stop()
		for {
			select {
			case err := <-d.denied:
				deniedErr <- err
				wcancel()
				records.Stop()
				return
			case <-check.C:
				// A stream not found (deleted, not yet created again) is
				// looked up again at the next check.
				if c, err := d.setupCreated(wctx); err == nil && !c.Equal(created) {
					recreated <- struct{}{}
					wcancel()
					records.Stop()
					return
				}
			case <-wctx.Done():
				return
			}
		}
	}()
	for {
		msg, err := records.Next(jetstream.NextContext(wctx))
		if err != nil {
			select {
			case derr := <-deniedErr:
				return false, fmt.Errorf("dealer: the NATS server refused the pull of the dealer's set-up records (%w): its nats-auth.conf lacks this release's permissions: run `duet keys --if-missing` on the keys directory and reload or restart the NATS server (compose: `make up`, then `docker compose -p duet kill -s HUP nats`; Kubernetes: `make k8s-secrets`, then `kubectl -n duet rollout restart statefulset/nats`; README, Operations, Upgrading: the NATS permissions)", derr)
			case <-recreated:
				return ctx.Err() == nil, nil
			default:
			}
		}
		if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, context.Canceled) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("dealer: watch set-up: %w", err)
		}
		key, ok := bus.SetupKeyOf(msg.Subject())
		if !ok {
			continue
		}
		if recordRemoved(msg.Headers()) {
			d.unregister(key)
			continue
		}
		if err := d.register(ctx, wg, key, msg.Data()); err != nil {
			d.opt.Metrics.Reject(err)
			d.opt.Log.Error("dealer set-up rejected", "key", key, "err", err)
		}
	}
}

// setupCreated is when the set-up bucket's stream was created, which tells
// a stream deleted and created again from the one the watch began on.
func (d *Dealer) setupCreated(ctx context.Context) (time.Time, error) {
	return bus.StreamCreated(ctx, d.js, bus.SetupStream)
}

// watchRecords delivers the dealer records of the set-up bucket, the latest
// of each loop first and then every change, through an ordered consumer
// filtered on them alone, as a watch of the bucket's keys would. The
// dealers' right to create consumers on the bucket's stream takes no other
// filter (internal/acl): a dealer cannot read the other roles' set-up
// records.
func (d *Dealer) watchRecords(ctx context.Context) (jetstream.MessagesContext, error) {
	cons, err := d.js.OrderedConsumer(ctx, bus.SetupStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.DealerSetupFilter},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return nil, err
	}
	return cons.Messages()
}

// recordRemoved tells a KV record's deletion or purge, or its removal by
// the server (a marker), from a record written.
func recordRemoved(h nats.Header) bool {
	switch h.Get(kvOperation) {
	case "DEL", "PURGE":
		return true
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge", "Remove":
		return true
	}
	return false
}

// kvOperation is the header JetStream KV marks a deletion or purge with
// (the jetstream package does not export it).
const kvOperation = "KV-Operation"

func (d *Dealer) register(ctx context.Context, wg *sync.WaitGroup, key string, data []byte) error {
	h, body, err := d.sealer.Open(data)
	if err != nil {
		return err
	}
	if h.Kind != codec.KindDealerSetup || h.From != codec.RoleSensor || key != bus.SetupKey(h.Loop, codec.RoleDealer) {
		return fmt.Errorf("%w: record %s is %s from %s for loop %q", codec.ErrHeader, key, h.Kind, h.From, h.Loop)
	}
	var sp codec.DealerSetupPayload
	if err := codec.Unmarshal(body, &sp); err != nil {
		return err
	}
	prm, err := sp.Params.Params()
	if err != nil {
		return err
	}
	if len(sp.Secret) != 32 {
		return fmt.Errorf("%w: session secret has %d bytes", codec.ErrMalformed, len(sp.Secret))
	}
	// An item the server or the parties cannot carry is refused before any
	// is made: its generator would build hundreds of MB of material (n =
	// 1,000) every refill round only to fail to publish it. The sensor
	// refuses such a set-up itself; this guards against one that did not.
	var tooLarge error
	if why := bus.ItemTooLarge(mpc.DealerBytesPerTick(prm, sp.Compress), bus.ItemOverhead, d.nc.MaxPayload()); why != "" {
		tooLarge = fmt.Errorf("%w: loop %s: %s", codec.ErrTooLarge, h.Loop, why)
	}
	var gen *mpc.Dealer
	if tooLarge == nil {
		var secret [32]byte
		copy(secret[:], sp.Secret)
		if gen, err = mpc.NewDealer(prm, mpc.NewSession(secret), sp.Compress); err != nil {
			return err
		}
	}
	m := d.opt.Metrics
	metrics.Zero([]string{h.Loop}, m.ItemsPublished, m.LowWater, m.QueueFull, m.PublishErrors) // from the start: metrics.Zero
	d.mu.Lock()
	d.keys[key] = h.Loop
	if d.epoch[h.Loop] == sp.Epoch {
		d.mu.Unlock()
		return nil
	}
	// A new epoch replaces the old generator at once, before its stream is
	// looked up: the old epoch's items are refused by both parties.
	if cancel := d.loops[h.Loop]; cancel != nil {
		cancel()
		// The old epoch's depth is not the new one's: until the new
		// generator has checked its queue (its stream may not be found
		// for a while), no depth, as for a loop no dealer serves.
		m.QueueDepth.DeleteLabelValues(h.Loop)
	}
	if tooLarge != nil {
		// The epoch is taken, unserved: the old one's generator stopped
		// and its depth gone, as the parties refuse its items too.
		delete(d.loops, h.Loop)
		d.epoch[h.Loop] = sp.Epoch
		d.mu.Unlock()
		return tooLarge
	}
	lctx, cancel := context.WithCancel(ctx)
	d.loops[h.Loop], d.epoch[h.Loop] = cancel, sp.Epoch
	d.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		stream, err := d.lookupStream(lctx, h.Loop)
		if err != nil {
			return // replaced by a later epoch, or the dealer stops
		}
		d.opt.Log.Info("serving loop", "dealer", d.opt.Name, "loop", h.Loop, "epoch", sp.Epoch, "compress", sp.Compress)
		d.serve(lctx, h.Loop, sp.Epoch, prm, gen, stream, max(1, sp.ItemsPerMsg))
	}()
	return nil
}

// dropUnlisted stops serving the loops whose dealer records the set-up
// bucket, found recreated, does not hold: the watch of the new bucket
// delivers its records, but no deletion of those that are gone, and their
// generators went on (a loop whose stream is gone too counting publish
// errors, and keeping DuetOfflinePublishFailing firing, for as long as the
// dealer ran). A loop whose record the bucket holds, under any epoch, is
// kept (its record, delivered by the watch, replaces its epoch if need be);
// one whose record is written after the look is served again when the
// watch delivers it. If the bucket cannot be listed, every loop is kept.
func (d *Dealer) dropUnlisted(ctx context.Context) {
	var info *jetstream.StreamInfo
	stream, err := d.js.Stream(ctx, bus.SetupStream)
	if err == nil {
		info, err = stream.Info(ctx, jetstream.WithSubjectFilter(bus.DealerSetupFilter))
	}
	if err != nil {
		if ctx.Err() == nil {
			d.opt.Log.Warn("dealer: could not list the recreated set-up bucket's dealer records: every loop served is kept", "dealer", d.opt.Name, "err", err)
		}
		return
	}
	held := map[string]bool{}
	for subj := range info.State.Subjects {
		if key, ok := bus.SetupKeyOf(subj); ok {
			held[key] = true
		}
	}
	d.mu.Lock()
	var gone []string
	for key := range d.keys {
		if !held[key] {
			gone = append(gone, key)
		}
	}
	d.mu.Unlock()
	for _, key := range gone {
		d.drop(key, slog.LevelWarn, "loop's set-up record is not in the recreated set-up bucket: no longer served (until its record is written again)")
	}
}

// unregister stops serving the loop whose set-up record key was deleted or
// purged (the loop removed by an operator): its generator would otherwise go
// on filling a queue no party reads, and checking a stream that may be
// gone, for as long as the dealer runs. A record written again registers
// the loop anew.
func (d *Dealer) unregister(key string) {
	d.drop(key, slog.LevelInfo, "loop's set-up record removed: no longer served")
}

// drop stops serving the loop of set-up record key, if it is served, and
// logs msg at level once.
func (d *Dealer) drop(key string, level slog.Level, msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	loop, ok := d.keys[key]
	if !ok {
		return
	}
	if cancel := d.loops[loop]; cancel != nil {
		cancel()
	}
	delete(d.loops, loop)
	delete(d.epoch, loop)
	delete(d.keys, key)
	d.opt.Metrics.QueueDepth.DeleteLabelValues(loop) // not a depth for good
	d.opt.Log.Log(context.Background(), level, msg, "dealer", d.opt.Name, "loop", loop)
}

// setDepth exports a loop's queue depth, found by the generator of epoch,
// if that is still the loop's: not once the loop's set-up record was removed
// (unregister, which drops the series) or replaced, so that a check that
// ends just then does not bring the series back for good.
func (d *Dealer) setDepth(loop string, epoch uint64, depth int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.epoch[loop]; ok && e == epoch {
		d.opt.Metrics.QueueDepth.WithLabelValues(loop).Set(float64(depth))
	}
}

// lookupStreamMaxWait caps the wait between a loop's stream lookups.
var lookupStreamMaxWait = 5 * time.Second

// lookupStream looks a loop's offline stream up until it is found or ctx
// ends. The set-up record is not delivered again until the sensor writes
// another, so a lookup lost to a reconnect, a busy server or a stream not
// (yet, or no longer) there is retried, 200 ms after the first failure and
// then twice as long each time up to lookupStreamMaxWait, logged the first
// time and then once a minute. It used to give up after about 6 s, and the
// loop was not served until the dealer restarted; the old epoch's generator,
// if any, went on filling the queue with items the parties refuse.
func (d *Dealer) lookupStream(ctx context.Context, loop string) (jetstream.Stream, error) {
	logs := bus.NewLogLimit()
	for n := 0; ; n++ {
		wait := backoff(200*time.Millisecond, lookupStreamMaxWait, n)
		stream, err := d.js.Stream(ctx, bus.OfflineStream(loop))
		if err == nil {
			return stream, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d.opt.Metrics.PublishErrors.WithLabelValues(loop).Inc()
		if ok, notLogged := logs.Allow(err.Error()); ok {
			d.opt.Log.Warn("looking up a loop's offline stream: retrying", "loop", loop, "in", wait, "err", err, "repeats_not_logged", notLogged)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// serve keeps one loop's queue above the low-water mark, publishing up to
// perMsg items in each stream message.
func (d *Dealer) serve(ctx context.Context, loop string, epoch uint64, prm mpc.Params, gen *mpc.Dealer, stream jetstream.Stream, perMsg int) {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		d.opt.Log.Error("randomness", "err", err)
		return
	}
	q := &queue{loop: loop, epoch: epoch, prm: prm, gen: gen, rng: mpc.NewPRG(key, [16]byte{}), subj: bus.OfflineSubject(loop), perMsg: perMsg,
		limit: min(bus.MaxOfflineMsg, int(d.nc.MaxPayload())/2)}
	var capMsgs int64 // the queue's size in stream messages (0: not known)
	if info := stream.CachedInfo(); info != nil {
		capMsgs = max(0, info.Config.MaxMsgs)
	}
	if capMsgs > 0 && capMsgs*int64(q.perMsg) <= int64(d.opt.LowWater) {
		// The sensor sizes the queue (DUET_QUEUE_MAX), the dealer its mark.
		d.opt.Log.Warn("the offline queue cannot reach DUET_LOW_WATER: every refill will find it full; raise the sensor's DUET_QUEUE_MAX or lower DUET_LOW_WATER",
			"loop", loop, "queue_items", capMsgs*int64(q.perMsg), "low_water", d.opt.LowWater)
	}
	wait := time.NewTimer(d.opt.Poll)
	wait.Stop()
	defer wait.Stop()
	var cons consumers
	var pace pacer
	full := 0   // refill rounds in a row that found the stream full
	failed := 0 // depth checks in a row that failed
	logs := bus.NewLogLimit()
	for {
		// A depth check lost with a server restart is given up after
		// pollTimeout, not the JetStream default of 5 s: meanwhile the
		// parties drain the queue, and a short one may run dry.
		pctx, cancel := context.WithTimeout(ctx, d.pollTimeout())
		depth, held, taken, err := cons.pendingMsgs(pctx, stream)
		cancel()
		next := d.opt.Poll
		if err == nil {
			failed = 0
			depth *= q.perMsg // items: every message the parties have not taken is full
			d.setDepth(loop, epoch, depth)
			rate := pace.observe(time.Now(), taken*q.perMsg, d.opt.PollMax)
			if depth < d.opt.LowWater {
				d.opt.Metrics.LowWater.WithLabelValues(loop).Inc()
				// One batch per round, then look again: with several replicas
				// each would otherwise refill the whole deficit. No more than
				// the stream has room for beside what it holds for the party
				// behind (held, not the depth, the party ahead's): a larger
				// batch (DUET_BATCH above the queue's size less the low-water
				// mark) was refused in part every round, counted as a full
				// queue, its items drawn and sealed for nothing. At least one
				// item: a queue that cannot reach the mark, full, is still
				// found full and backed off from.
				n := d.opt.Batch
				if capMsgs > 0 {
					n = max(1, min(n, (int(capMsgs)-held)*q.perMsg))
				}
				res := d.refill(ctx, q, n)
				if res == refilled {
					full = 0
					continue
				}
				// The stream is at MaxMsgs (DiscardNew): one party is far
				// behind the other, or down. Or the round failed (refill
				// logged and counted why). Each round drew and sealed a batch
				// that did not land, so back off: DUET_POLL, doubled each
				// round, up to DUET_POLL_MAX.
				if res == refillFull {
					d.opt.Metrics.QueueFull.WithLabelValues(loop).Inc()
				}
				next = backoff(d.opt.Poll, d.opt.PollMax, full)
				full++
			} else {
				full = 0
				next = spread(nextCheck(depth-d.opt.LowWater, d.opt.LowWater, rate, d.opt.Poll, d.opt.PollMax), d.opt.Poll)
			}
		} else {
			pace = pacer{} // a recreated consumer starts its count again
			// Backed off as a full queue is (a stream deleted under a
			// running dealer was checked every DUET_POLL for good), and,
			// from the second failure in a row (one is lost to each server
			// restart), counted as a failed round, its depth no longer
			// exported (the last one found would hide the queue running
			// dry, and with it the other replicas' depths in the
			// DuetOfflineQueueLow alert's max), and logged the first time
			// and then once a minute.
			next = backoff(d.opt.Poll, d.opt.PollMax, failed)
			failed++
			if failed > 1 && ctx.Err() == nil {
				d.opt.Metrics.PublishErrors.WithLabelValues(loop).Inc()
				d.opt.Metrics.QueueDepth.DeleteLabelValues(loop)
				if ok, notLogged := logs.Allow(err.Error()); ok {
					d.opt.Log.Warn("checking a loop's queue depth", "loop", loop, "err", err, "failures_in_a_row", failed, "repeats_not_logged", notLogged)
				}
			}
		}
		wait.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
	}
}

// pacer estimates how fast the parties take a queue's items, from the
// stream sequence their consumers have reached at each depth check.
type pacer struct {
	at    time.Time // the start of the current window
	taken int       // the count then
	rate  float64   // items a second; < 0 while unknown
	known bool
}

// observe records that the parties had taken taken items by now and returns
// the rate to plan the next check by (items a second), or -1 while it is
// unknown. The rate is the average since the window began, taken once a
// quarter of the window has passed (a first estimate, so that a replica
// that starts with many loops soon stops checking at its shortest
// interval), and then over whole windows: deliveries come in bursts (a
// party pulls a batch at a time), and the checks while a dealer refills
// come milliseconds apart.
func (p *pacer) observe(now time.Time, taken int, window time.Duration) float64 {
	if !p.known || taken < p.taken { // the first check, or a recreated consumer
		*p = pacer{at: now, taken: taken, rate: -1, known: true}
		return p.rate
	}
	if el := now.Sub(p.at); el >= window || (p.rate < 0 && el >= window/4 && el > 0) {
		p.rate = float64(taken-p.taken) / el.Seconds()
		if el >= window {
			p.at, p.taken = now, taken
		}
	}
	return p.rate
}

// nextCheck is how long to wait before checking again a queue that holds
// headroom items above its low-water mark while the parties take rate items
// a second (< 0: unknown, see pacer): the time they would take to bring it a
// quarter of the mark below the mark, between poll and pollMax. The mark is
// itself the margin (30 s of ticks by default), and a party pulls its items
// in batches, so the depth falls in steps: waiting only until the mark would
// make check after check while a batch's worth of items sits above it.
// Every replica checks every loop's queue, each check a request per party
// to the server, so a queue far from running dry is checked every pollMax
// rather than every poll.
func nextCheck(headroom, lowWater int, rate float64, poll, pollMax time.Duration) time.Duration {
	if rate < 0 { // until the first estimate: a quarter of pollMax
		return min(max(poll, pollMax/4), pollMax)
	}
	d := pollMax
	if rate > 0 {
		if s := float64(headroom+lowWater/4) / rate; s < pollMax.Seconds() {
			d = time.Duration(s * float64(time.Second))
		}
	}
	return min(max(d, poll), pollMax)
}

// spread takes up to a quarter off d at random, but not below poll. A
// replica starts serving all its loops at once, and loops at the same rate
// would otherwise keep their checks in step: every DUET_POLL_MAX a burst of
// two requests per loop at the server that the parties share.
func spread(d, poll time.Duration) time.Duration {
	if q := d / 4; q > 0 {
		d -= mrand.N(q)
	}
	return max(d, poll)
}

// backoff is poll doubled n times, at most pollMax.
func backoff(poll, pollMax time.Duration, n int) time.Duration {
	d := poll
	for ; n > 0 && d < pollMax; n-- {
		d = min(2*d, pollMax)
	}
	return min(d, pollMax)
}

// pollTimeout bounds one depth check: four polls, at least 200 ms.
func (d *Dealer) pollTimeout() time.Duration { return max(4*d.opt.Poll, 200*time.Millisecond) }

// queue is what a dealer needs to fill one loop's queue.
type queue struct {
	loop   string
	epoch  uint64
	prm    mpc.Params
	gen    *mpc.Dealer
	rng    interface{ Read([]byte) (int, error) }
	subj   string
	perMsg int // items per stream message (lowered once to fit limit)
	limit  int // bytes per stream message
	sized  bool

	// Scratch reused for every item (one goroutine serves a queue): the
	// material's matrix entries, its encoding, and each party's sealed
	// share, which MarshalAppend copies into the stream message.
	mat, body, seal0, seal1 []byte
	tag                     [mpc.ItemTagLen]byte // a compressed item's, for party0
	msgLen                  int                  // the last stream message's length, to size the next
	// The payloads being encoded, kept here so that handing them to the
	// codec (as an interface) does not move a copy to the heap per item.
	pm  codec.MaterialPayload
	msg codec.ItemMsg
}

// consumers are a queue's two party consumers, looked up once and kept, so
// that each depth check costs the server one consumer-info request per
// party: every replica checks every loop's queue every DUET_POLL, and
// looking a consumer up is itself such a request (a check that looked both
// up and then asked for their info made four: at 500 loops and two
// replicas polling every 200 ms, filling the queues took 36-108 s against
// 13-17 s with one request each, duet bench's scale set-up).
type consumers [2]jetstream.Consumer

// pendingMsgs is the queue depth as the parties see it, in stream messages:
// the fewer of the messages not yet delivered to either party's consumer.
// (The stream's message count is not used: it also holds items one party
// has taken and the other not yet, and after a server restart it can lag
// the consumers.) A consumer whose info cannot be read is looked up again
// at the next check (it may have been recreated by a new set-up).
//
// taken is the stream sequence of the last message delivered to the party
// that is further ahead: how far the parties have taken the queue, to pace
// the checks by. held is the more of the messages not yet delivered: what
// the stream holds for the party behind, which its MaxMsgs bounds.
func (cs *consumers) pendingMsgs(ctx context.Context, stream jetstream.Stream) (depth, held, taken int, err error) {
	depth = -1
	for i := range cs {
		var info *jetstream.ConsumerInfo
		if cs[i] == nil {
			c, err := stream.Consumer(ctx, bus.ConsumerName(i))
			if err != nil {
				return 0, 0, 0, err
			}
			cs[i], info = c, c.CachedInfo() // the lookup's own info
		} else if info, err = cs[i].Info(ctx); err != nil {
			cs[i] = nil
			return 0, 0, 0, err
		}
		if n := int(info.NumPending); depth < 0 || n < depth {
			depth = n
		}
		held = max(held, int(info.NumPending))
		taken = max(taken, int(info.Delivered.Stream))
	}
	return depth, held, taken, nil
}

// refillResult is how a refill round ended.
type refillResult uint8

const (
	refilled   refillResult = iota // every message published (or the dealer stopped)
	refillFull                     // the stream refused a message: at MaxMsgs (DiscardNew)
	refillFail                     // an item not drawn or sealed, or a message not published or acknowledged
)

// refill publishes about n items (whole messages) and says how that went.
// A failed round is logged and counted once
// (duet_offline_publish_errors_total); the caller backs off either way, so a
// message the server always refuses (larger than its max_payload, say)
// costs one batch per DUET_POLL_MAX, not a busy loop.
func (d *Dealer) refill(ctx context.Context, q *queue, n int) refillResult {
	futures := make([]jetstream.PubAckFuture, 0, n)
	counts := make([]int, 0, n)
	fail := func(what string, err error) refillResult {
		d.opt.Metrics.PublishErrors.WithLabelValues(q.loop).Inc()
		d.opt.Log.Error(what, "loop", q.loop, "err", err)
		return refillFail
	}
	var res refillResult
	for i := 0; i < n && ctx.Err() == nil; {
		data, k, err := d.message(q)
		if err != nil {
			res = fail("generating offline items", err)
			break
		}
		// No retry of a publish the server had no responder for (a stream
		// leader election, say): the client would send it again 250 ms
		// later, behind the messages published meanwhile, and the parties
		// would refuse its items, whose counters would then be out of order
		// (itemSerials), as replays. Failed, it is counted and the next
		// round publishes fresh items in order.
		f, err := d.js.PublishAsync(q.subj, data, jetstream.WithRetryAttempts(0))
		if err != nil {
			res = fail("publishing offline items", fmt.Errorf("a message of %d items, %d bytes: %w", k, len(data), err))
			break
		}
		futures, counts = append(futures, f), append(counts, k)
		i += k
	}
	// A publish lost while the server restarts may never be acknowledged:
	// wait a bounded time, then poll again.
	wait := time.NewTimer(5 * time.Second)
	defer wait.Stop()
	var refused error
	for i, f := range futures {
		select {
		case <-wait.C:
			if res == refillFail { // counted and logged already
				return res
			}
			return fail("publishing offline items", errors.New("not acknowledged within 5 s"))
		case <-f.Ok():
			d.opt.Metrics.ItemsPublished.WithLabelValues(q.loop).Add(float64(counts[i]))
		case err := <-f.Err():
			if msg := err.Error(); strings.Contains(msg, "maximum messages") || strings.Contains(msg, "maximum bytes") {
				res = max(res, refillFull)
			} else if refused == nil {
				refused = err
			}
		case <-ctx.Done():
			return res
		}
	}
	if refused != nil && res != refillFail {
		return fail("publishing offline items", refused)
	}
	return res
}

// message draws up to q.perMsg items into one stream message: each item's
// encoding, concatenated (codec.PeekItems). The first message of a loop
// lowers q.perMsg so that a message stays within q.limit bytes (the sensor
// has sized it from an estimate already; a server with a smaller
// max_payload lowers it further).
func (d *Dealer) message(q *queue) ([]byte, int, error) {
	// Each message gets its own buffer (a publish future keeps it), sized
	// from the last one so that appending items does not regrow it.
	data, err := d.item(q, make([]byte, 0, q.msgLen))
	if err != nil {
		return nil, 0, err
	}
	if !q.sized {
		q.perMsg, q.sized = bus.ItemsPerMsg(q.perMsg, len(data), q.limit), true
	}
	k := 1
	for ; k < q.perMsg; k++ {
		if data, err = d.item(q, data); err != nil {
			return nil, 0, err
		}
	}
	q.msgLen = len(data)
	return data, k, nil
}

// item draws one item, seals each party's share to it and appends its
// encoding to b.
func (d *Dealer) item(q *queue, b []byte) ([]byte, error) {
	loop, epoch, prm := q.loop, q.epoch, q.prm
	it, err := q.gen.Next(q.rng)
	if err != nil {
		return nil, err
	}
	msg := &q.msg
	*msg = codec.ItemMsg{Loop: loop, Epoch: epoch, Nonce: it.Nonce}
	seal := func(dst *[]byte, to codec.Role, m mpc.TickMaterial) ([]byte, error) {
		// The payload's matrices alias q.mat until the body is encoded.
		q.pm, q.mat = codec.AppendMaterial(prm.Field, q.mat[:0], it.Nonce, m)
		if q.body, err = codec.MarshalAppend(q.body[:0], &q.pm); err != nil {
			return nil, err
		}
		*dst, err = d.sealer.SealAppend((*dst)[:0], codec.Header{Kind: codec.KindMaterial, Loop: loop, Tick: epoch, From: codec.RoleDealer, To: to}, q.body)
		return *dst, err
	}
	if it.P0 != nil {
		if msg.P0, err = seal(&q.seal0, codec.RoleParty0, *it.P0); err != nil {
			return nil, err
		}
	} else {
		// Compressed: party0 checks the nonce by its tag.
		q.tag = it.Tag
		msg.P0 = q.tag[:]
	}
	if msg.P1, err = seal(&q.seal1, codec.RoleParty1, it.P1); err != nil {
		return nil, err
	}
	return codec.MarshalAppend(b, msg)
}
