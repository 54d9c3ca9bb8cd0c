package dealer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/acl"
	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/internal/testlog"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// TestNewEpochReplacesTheOldAtOnce: a set-up record of a new epoch stops
// the old epoch's generator before the loop's stream is looked up, and a
// lookup that fails (here the stream is gone for a while) is retried until
// the stream is there, so the queue then holds the new epoch's items only.
// A record removed stops the loop's generator, and one written again
// starts it anew.
// Before, the lookup gave up after about 6 s with an error ("not served"),
// and the old epoch's generator went on filling the recreated queue with
// items both parties refuse.
func TestNewEpochReplacesTheOldAtOnce(t *testing.T) {
	defer func(w time.Duration) { lookupStreamMaxWait = w }(lookupStreamMaxWait)
	lookupStreamMaxWait = 50 * time.Millisecond
	ctx := t.Context()
	nc := natstest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const loop = "l1"
	queue := func() jetstream.Stream {
		s, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: loop, MaxMsgs: 1000}, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	stream := queue()
	sealers := testkeys.Sealers(t)
	d := testDealer(t, nc, sealers[codec.RoleDealer], "d")
	m := d.opt.Metrics
	prm := pendulumParams(t, mpc.PerTick)
	key := bus.SetupKey(loop, codec.RoleDealer)
	record := func(epoch uint64) []byte { return dealerRecord(t, sealers[codec.RoleSensor], prm, loop, epoch) }
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	filled := func(s jetstream.Stream) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			info, err := s.Info(ctx)
			if err == nil && info.State.Msgs >= 2 {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("the queue was not filled in 10 s (%v)", err)
			}
		}
	}

	if err := d.register(rctx, &wg, key, record(1)); err != nil {
		t.Fatal(err)
	}
	filled(stream)
	for give := time.Now().Add(5 * time.Second); testutil.CollectAndCount(m.QueueDepth) == 0; {
		if time.Now().After(give) {
			t.Fatal("epoch 1's generator exported no queue depth")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := js.DeleteStream(ctx, bus.OfflineStream(loop)); err != nil {
		t.Fatal(err)
	}
	if err := d.register(rctx, &wg, key, record(2)); err != nil {
		t.Fatalf("epoch 2's record: %v; want it taken, its stream looked up until there", err)
	}
	time.Sleep(300 * time.Millisecond) // lookups fail meanwhile
	if metrics.Sum(m.PublishErrors) == 0 {
		t.Error("no failed lookup counted while the stream was gone")
	}
	// Epoch 1's depth is not exported while epoch 2's stream is not
	// found: it would hide the queue running dry (DuetOfflineQueueLow) and
	// that no dealer serves the loop (DuetOfflineQueueUnwatched).
	if n := testutil.CollectAndCount(m.QueueDepth); n != 0 {
		t.Errorf("%d queue depth series while the new epoch's stream is not found, want none", n)
	}
	stream = queue()
	filled(stream)
	// The loop's set-up record removed: its generator stops; a purged
	// queue stays empty.
	d.unregister(key)
	// A depth check of the removed loop's generator that ends just now
	// does not export its depth again (it would stay for good).
	d.setDepth(loop, 2, 100)
	if n := testutil.CollectAndCount(m.QueueDepth); n != 0 {
		t.Errorf("%d queue depth series after the loop's record was removed, want none", n)
	}
	time.Sleep(100 * time.Millisecond) // a round in flight lands
	if err := stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // 15 polls
	if info, err := stream.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("after the loop's record was removed: %v messages in its queue (%v), want none", info.State.Msgs, err)
	}
	// Written again, the record registers the loop anew.
	if err := d.register(rctx, &wg, key, record(3)); err != nil {
		t.Fatal(err)
	}
	filled(stream)
	cancel()
	wg.Wait()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		items, err := codec.PeekItems(msg.Data, codec.MaxItemsPerMsg)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if it.Epoch != 3 {
				t.Fatalf("message %d holds an item of epoch %d, want 3: an old generator still ran", seq, it.Epoch)
			}
		}
	}
}

// TestRunFollowsTheDealerRecords: Run serves the loops whose dealer records
// its watch of the set-up bucket delivers, stops serving one whose record
// is deleted or purged, and serves it again when the record is written
// again; other roles' records are not delivered. A failed watch (here the
// connection closed under it) ends Run and its loops' generators, rather
// than leaving Run waiting for them.
func TestRunFollowsTheDealerRecords(t *testing.T) {
	ctx := t.Context()
	ns, nc := natstest.Start(t)
	js, kv := setupBucket(t, nc)
	sealers := testkeys.Sealers(t)
	prm := pendulumParams(t, mpc.PerTick)
	record := func(loop string, epoch uint64) []byte {
		return dealerRecord(t, sealers[codec.RoleSensor], prm, loop, epoch)
	}
	for _, loop := range []string{"a", "b"} {
		if _, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: loop, MaxMsgs: 1000}, 1, false); err != nil {
			t.Fatal(err)
		}
	}
	// Loop a's record before the dealer starts (the last per key first),
	// b's after.
	if _, err := kv.Put(ctx, bus.SetupKey("a", codec.RoleDealer), record("a", 1)); err != nil {
		t.Fatal(err)
	}
	dnc, err := nats.Connect(ns.ClientURL()) // the dealer's own connection, closed below
	if err != nil {
		t.Fatal(err)
	}
	defer dnc.Close()
	d := testDealer(t, dnc, sealers[codec.RoleDealer], "d")
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	served := func() []string {
		d.mu.Lock()
		defer d.mu.Unlock()
		return slices.Sorted(maps.Keys(d.loops))
	}
	waitServed := func(want ...string) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); !slices.Equal(served(), want); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("serving %v, want %v", served(), want)
			}
		}
	}
	waitServed("a")
	// Another role's record of loop c is not a dealer record.
	if _, err := kv.Put(ctx, bus.SetupKey("c", codec.RoleParty0), record("c", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, bus.SetupKey("b", codec.RoleDealer), record("b", 1)); err != nil {
		t.Fatal(err)
	}
	waitServed("a", "b")
	if err := kv.Delete(ctx, bus.SetupKey("a", codec.RoleDealer)); err != nil {
		t.Fatal(err)
	}
	waitServed("b")
	if err := kv.Purge(ctx, bus.SetupKey("b", codec.RoleDealer)); err != nil {
		t.Fatal(err)
	}
	waitServed()
	if _, err := kv.Put(ctx, bus.SetupKey("a", codec.RoleDealer), record("a", 2)); err != nil {
		t.Fatal(err)
	}
	waitServed("a")
	dnc.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its connection closed (it waited for loop a's generator)")
	}
}

// TestRunFollowsARecreatedSetupBucket: the set-up bucket deleted and
// created again (nats kv rm, or a NATS server restarted on memory storage),
// with a new set-up's dealer record at a stream sequence below the one the
// watch had reached, as a sensor's set-up in the same order writes it. Run
// serves the new epoch: the watch's ordered consumer, reset on the new
// stream from its old position, would never deliver the record, and the
// old epoch's generator would go on filling the queue with items the
// parties refuse. Loop b, whose record the new bucket does not hold, is no
// longer served: before, its generator ran on for as long as the dealer.
func TestRunFollowsARecreatedSetupBucket(t *testing.T) {
	defer func(d time.Duration) { recreateCheck = d }(recreateCheck)
	recreateCheck = 50 * time.Millisecond
	ctx := t.Context()
	ns, nc := natstest.Start(t)
	js, kv := setupBucket(t, nc)
	for _, loop := range []string{"a", "b"} {
		if _, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: loop, MaxMsgs: 1000}, 1, false); err != nil {
			t.Fatal(err)
		}
	}
	sealers := testkeys.Sealers(t)
	prm := pendulumParams(t, mpc.PerTick)
	put := func(kv jetstream.KeyValue, key string, v []byte) uint64 {
		t.Helper()
		seq, err := kv.Put(ctx, key, v)
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	put(kv, bus.SetupKey("a", codec.RoleParty0), []byte("p0"))
	put(kv, bus.SetupKey("a", codec.RoleParty1), []byte("p1"))
	put(kv, bus.SetupKey("a", codec.RoleDealer), dealerRecord(t, sealers[codec.RoleSensor], prm, "a", 1))
	put(kv, bus.SetupKey("b", codec.RoleDealer), dealerRecord(t, sealers[codec.RoleSensor], prm, "b", 1))
	dnc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer dnc.Close()
	d := testDealer(t, dnc, sealers[codec.RoleDealer], "d")
	// Run ends before recreateCheck is restored (it reads it).
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		d.Run(rctx)
	}()
	defer func() { cancel(); <-ran }()
	waitEpoch := func(want uint64, within time.Duration) {
		t.Helper()
		for end := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
			d.mu.Lock()
			got, served := d.epoch["a"], d.loops["a"] != nil
			d.mu.Unlock()
			if got == want && served {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("loop a served at epoch %d (served %v), want epoch %d", got, served, want)
			}
		}
	}
	waitEpoch(1, 5*time.Second)
	served := func(loop string) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.loops[loop] != nil
	}
	for end := time.Now().Add(5 * time.Second); !served("b"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("loop b not served")
		}
	}
	if err := js.DeleteKeyValue(ctx, bus.SetupBucket); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the watch's consumer finds its stream gone
	_, kv = setupBucket(t, nc)
	if seq := put(kv, bus.SetupKey("a", codec.RoleDealer), dealerRecord(t, sealers[codec.RoleSensor], prm, "a", 2)); seq >= 4 {
		t.Fatalf("the new record is at stream sequence %d: the test needs it below the watch's position, 4", seq)
	}
	waitEpoch(2, 10*time.Second)
	for end := time.Now().Add(10 * time.Second); served("b"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("loop b, whose record the recreated bucket does not hold, is still served")
		}
	}
}

// TestDropUnlistedKeepsListedLoops: after the set-up bucket is recreated,
// a loop whose dealer record the bucket holds is kept, whatever the
// record's epoch, and one whose record it does not hold is no longer
// served, logged once at warning level; a bucket that cannot be listed
// (not there) stops no loop.
func TestDropUnlistedKeepsListedLoops(t *testing.T) {
	ctx := t.Context()
	_, nc := natstest.Start(t)
	js, _ := setupBucket(t, nc)
	sealers := testkeys.Sealers(t)
	prm := pendulumParams(t, mpc.PerTick)
	var logs testlog.Buffer
	d := testDealer(t, nc, sealers[codec.RoleDealer], "d")
	d.opt.Log = slog.New(slog.NewTextHandler(&logs, nil))
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, loop := range []string{"a", "b", "c"} {
		if _, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: loop, MaxMsgs: 1000}, 1, false); err != nil {
			t.Fatal(err)
		}
		if err := d.register(rctx, &wg, bus.SetupKey(loop, codec.RoleDealer), dealerRecord(t, sealers[codec.RoleSensor], prm, loop, 1)); err != nil {
			t.Fatal(err)
		}
	}
	served := func() []string {
		d.mu.Lock()
		defer d.mu.Unlock()
		return slices.Sorted(maps.Keys(d.loops))
	}
	// No bucket to list: every loop kept.
	if err := js.DeleteKeyValue(ctx, bus.SetupBucket); err != nil {
		t.Fatal(err)
	}
	d.dropUnlisted(ctx)
	if got := served(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("serving %v with the bucket not there, want every loop kept", got)
	}
	// The recreated bucket holds a's record of the same epoch and b's of
	// another; c's is not there.
	_, kv := setupBucket(t, nc)
	if _, err := kv.Put(ctx, bus.SetupKey("a", codec.RoleDealer), dealerRecord(t, sealers[codec.RoleSensor], prm, "a", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, bus.SetupKey("b", codec.RoleDealer), dealerRecord(t, sealers[codec.RoleSensor], prm, "b", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, bus.SetupKey("c", codec.RoleParty0), []byte("another role's record")); err != nil {
		t.Fatal(err)
	}
	d.dropUnlisted(ctx)
	if got := served(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("serving %v, want a and b (their records held) and not c", got)
	}
	d.dropUnlisted(ctx) // c is dropped once, logged once
	var dropped []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "not in the recreated set-up bucket") {
			dropped = append(dropped, l)
		}
	}
	if len(dropped) != 1 || !strings.Contains(dropped[0], "level=WARN") || !strings.Contains(dropped[0], "loop=c") {
		t.Errorf("logged %q, want once, at warning level, for loop c", dropped)
	}
}

// dealerRecord is the sensor's dealer set-up record of loop and epoch for
// the parameters prm, sealed by sensor.
func dealerRecord(t *testing.T, sensor *codec.Sealer, prm mpc.Params, loop string, epoch uint64) []byte {
	t.Helper()
	body, err := codec.Marshal(codec.DealerSetupPayload{Epoch: epoch, Params: codec.PutParams(prm), Secret: make([]byte, 32), Compress: true,
		Stream: bus.OfflineStream(loop), Subject: bus.OfflineSubject(loop)})
	if err != nil {
		t.Fatal(err)
	}
	env, err := sensor.Seal(codec.Header{Kind: codec.KindDealerSetup, Loop: loop, Tick: epoch, From: codec.RoleSensor, To: codec.RoleDealer}, body)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestRunStopsWhenItsPullIsRefused runs a dealer as the NATS user of its
// role under this release's permissions, where it serves its loop, and
// under an earlier release's (nats-auth.conf before 1b713ad, which did not
// grant the pull from the dealers' filtered consumer of the set-up bucket),
// where the server lets it create the consumer but refuses every pull. Run
// then returns, naming the remedy, instead of creating the consumer again
// and again while the dealer stays up and ready and serves nothing.
func TestRunStopsWhenItsPullIsRefused(t *testing.T) {
	ctx := t.Context()
	perm := acl.Permissions(codec.RoleDealer)
	earlier := slices.DeleteFunc(slices.Clone(perm.Pub), func(s string) bool {
		return strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT."+bus.SetupStream)
	})
	if len(earlier) != len(perm.Pub)-1 {
		t.Fatalf("the dealer's grants %v hold no pull of the set-up records to take out", perm.Pub)
	}
	user := func(name string, pub []string) *server.User {
		return &server.User{Username: name, Password: name, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: pub},
			Subscribe: &server.SubjectPermission{Allow: perm.Sub},
		}}
	}
	ns := natstest.Server(t, &server.Options{JetStream: true, StoreDir: t.TempDir(), Users: []*server.User{
		{Username: "admin", Password: "admin"}, user("dealer", perm.Pub), user("earlier", earlier),
	}})
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("admin", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, kv := setupBucket(t, nc)
	if _, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: "a", MaxMsgs: 1000}, 1, false); err != nil {
		t.Fatal(err)
	}
	sealers := testkeys.Sealers(t)
	if _, err := kv.Put(ctx, bus.SetupKey("a", codec.RoleDealer), dealerRecord(t, sealers[codec.RoleSensor], pendulumParams(t, mpc.PerTick), "a", 1)); err != nil {
		t.Fatal(err)
	}
	start := func(name string) (*Dealer, chan error, *nats.Conn) {
		dnc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(name, name), nats.CustomInboxPrefix(acl.Inbox(codec.RoleDealer)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(dnc.Close)
		d := testDealer(t, dnc, sealers[codec.RoleDealer], name)
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		return d, done, dnc
	}
	// This release's grants: the loop is served, and Run goes on, also
	// past a refusal of something else (a publish the dealer may not make).
	d, done, dnc := start("dealer")
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d.mu.Lock()
		_, ok := d.loops["a"]
		d.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the dealer did not serve loop a under this release's permissions")
		}
	}
	if err := dnc.Publish(bus.OutputSubject("a"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned under this release's permissions: %v", err)
	case <-time.After(time.Second):
	}
	dnc.Close()
	select {
	case err := <-done:
		if err != nil && strings.Contains(err.Error(), "duet keys --if-missing") {
			t.Errorf("Run took another refusal for its pull's: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its connection closed")
	}
	// An earlier release's grants: refused, and said so.
	_, done, _ = start("earlier")
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "duet keys --if-missing") || !strings.Contains(err.Error(), "make k8s-secrets") {
			t.Fatalf("Run returned %v, want the refused pull and the remedy, for compose and Kubernetes", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run went on under an earlier release's permissions, which refuse its pulls")
	}
}

// setupBucket creates the set-up bucket through nc.
func setupBucket(t *testing.T, nc *nats.Conn) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := bus.EnsureSetupBucket(t.Context(), js, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// testDealer is a dealer on nc sealing with sealer, with the tests' short
// pacing and a quiet log.
func testDealer(t *testing.T, nc *nats.Conn, sealer *codec.Sealer, name string) *Dealer {
	t.Helper()
	d, err := New(nc, sealer, Options{Name: name, LowWater: 16, Batch: 8, Poll: 20 * time.Millisecond, PollMax: 100 * time.Millisecond,
		Metrics: metrics.New("d"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A set-up whose items the server cannot carry (n = m = p = 300: megabytes
// of material, over the test server's max_payload) is refused (the watch
// counts it as too_large) before any item is made, and the loop's earlier
// epoch is no longer served: before, the dealer built them every refill
// round only to fail to publish them (hundreds of MB a round for n = 1,000).
func TestRegisterRefusesItemsOverMaxPayload(t *testing.T) {
	nc := natstest.Conn(t)
	sealers := testkeys.Sealers(t)
	d := testDealer(t, nc, sealers[codec.RoleDealer], "d")
	m := d.opt.Metrics
	prm := pendulumParams(t, mpc.PerTick)
	prm.N, prm.M, prm.P = 300, 300, 300
	if mpc.DealerBytesPerTick(prm, true) <= int(nc.MaxPayload()) {
		t.Fatalf("%d bytes of material fit the server's max_payload of %d", mpc.DealerBytesPerTick(prm, true), nc.MaxPayload())
	}
	const loop = "big"
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	key := bus.SetupKey(loop, codec.RoleDealer)
	// Epoch 1, the pendulum, is served (its stream not there: looked up
	// meanwhile), with a depth exported.
	if err := d.register(ctx, &wg, key, dealerRecord(t, sealers[codec.RoleSensor], pendulumParams(t, mpc.PerTick), loop, 1)); err != nil {
		t.Fatal(err)
	}
	d.setDepth(loop, 1, 100)
	// Epoch 2, too large, is refused, and stops epoch 1's generator: the
	// parties refuse its items as well, and its depth would hide that no
	// dealer serves the loop.
	err := d.register(ctx, &wg, key, dealerRecord(t, sealers[codec.RoleSensor], prm, loop, 2))
	if !errors.Is(err, codec.ErrTooLarge) || !strings.Contains(err.Error(), "max_payload") {
		t.Fatalf("err = %v, want ErrTooLarge naming max_payload", err)
	}
	d.mu.Lock()
	served, epoch := d.loops[loop] != nil, d.epoch[loop]
	d.mu.Unlock()
	if served || epoch != 2 {
		t.Errorf("after the refused epoch: served %v at epoch %d, want not served, at epoch 2", served, epoch)
	}
	if n := testutil.CollectAndCount(m.QueueDepth); n != 0 {
		t.Errorf("%d queue depth series after the refused epoch, want none", n)
	}
	// The same record again (a watch restarted) is not refused twice.
	if err := d.register(ctx, &wg, key, dealerRecord(t, sealers[codec.RoleSensor], prm, loop, 2)); err != nil {
		t.Errorf("the refused record again: %v", err)
	}
}

// A dealer is ready (/readyz) only while it watches the set-up bucket: not
// while it waits for the bucket to be made, and not after Run has ended.
// Before, the command reported it ready from the start.
func TestReadyOnceTheBucketIsWatched(t *testing.T) {
	nc := natstest.Conn(t)
	d := testDealer(t, nc, testkeys.Sealers(t)[codec.RoleDealer], "d")
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		d.Run(ctx)
	}()
	time.Sleep(300 * time.Millisecond) // three looks for the bucket
	if d.Ready() {
		t.Fatal("ready with no set-up bucket to watch")
	}
	setupBucket(t, nc)
	for deadline := time.Now().Add(5 * time.Second); !d.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not ready 5 s after the set-up bucket was made")
		}
	}
	cancel()
	<-ran
	if d.Ready() {
		t.Error("ready after Run ended")
	}
}
