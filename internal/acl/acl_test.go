package acl_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/acl"
	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/demo"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

func startACL(t *testing.T, o demo.Options) *demo.Cluster {
	t.Helper()
	cs, ps, _, err := sim.LoadSpecs("../../examples/qube-servo2/controller.json", "../../examples/qube-servo2/plant.json")
	if err != nil {
		t.Fatal(err)
	}
	o.Controller, o.Plant, o.Fast, o.Compress = cs, ps, true, true
	o.Period, o.Deadline, o.Dealers, o.LowWater = 40*time.Millisecond, 30*time.Millisecond, 1, 100
	c, err := demo.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 50); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLoopRunsUnderPerRolePermissions(t *testing.T) {
	// Batched: the parties' batches need (and have) the permissions of
	// their exchange subjects.
	for _, batched := range []bool{false, true} {
		c := startACL(t, demo.Options{ACL: true, Variant: mpc.FixedMask, PeerBatchAlways: batched})
		if err := c.RunTicks(context.Background(), 200); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		s := demo.Summarize(c.Records())
		if s.Applied < 198 || s.Misses > 2 {
			t.Fatalf("under ACL (batched %v): %d of 200 ticks applied, %d misses", batched, s.Applied, s.Misses)
		}
		a := c.Audit()
		if a.Mismatched != 0 || a.Reused != 0 {
			t.Fatalf("audit %+v", a)
		}
		c.Close()
	}
}

// connectAs connects with a role's credentials and records async errors.
func connectAs(t *testing.T, c *demo.Cluster, r codec.Role) (*nats.Conn, func() []error) {
	t.Helper()
	var mu sync.Mutex
	var errs []error
	opts := append(c.User(r).Options(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}))
	nc, err := nats.Connect(c.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), errs...)
	}
}

// denied subscribes and checks the server refuses at once, naming the subject.
func deniedSub(t *testing.T, c *demo.Cluster, r codec.Role, subject string) {
	t.Helper()
	nc, errs := connectAs(t, c, r)
	start := time.Now()
	if _, err := nc.Subscribe(subject, func(*nats.Msg) {}); err != nil {
		t.Fatalf("%s subscribe %s: %v", r, subject, err)
	}
	if err := nc.FlushTimeout(2 * time.Second); err != nil {
		t.Fatalf("flush: %v", err)
	}
	err := nc.LastError()
	if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
		t.Fatalf("%s subscribing to %s: last error %v, want a permission violation naming the subject", r, subject, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("denial took %v", d)
	}
	_ = errs
}

func TestPermissionsDenyCrossRoleAccess(t *testing.T) {
	c := startACL(t, demo.Options{ACL: true})
	loop := "pendulum"
	// P0 cannot read P1's subjects, nor P1 P0's.
	deniedSub(t, c, codec.RoleParty0, bus.ExchangeSubject(loop, 1))
	deniedSub(t, c, codec.RoleParty0, bus.MeasureSubject(loop, 1))
	deniedSub(t, c, codec.RoleParty0, bus.BatchSubject(1))
	deniedSub(t, c, codec.RoleParty1, bus.ExchangeSubject(loop, 0))
	deniedSub(t, c, codec.RoleParty1, bus.MeasureSubject(loop, 0))
	deniedSub(t, c, codec.RoleParty1, bus.BatchSubject(0))
	deniedSub(t, c, codec.RoleParty1, acl.Inbox(codec.RoleParty0)+".>")
	// Neither party reads the output shares (the other's share of u).
	deniedSub(t, c, codec.RoleParty0, bus.OutputSubject(loop))
	deniedSub(t, c, codec.RoleParty1, bus.OutputSubject(loop))
	// The sensor cannot read the party-to-party exchange.
	deniedSub(t, c, codec.RoleSensor, bus.ExchangeSubject(loop, 0))
	deniedSub(t, c, codec.RoleSensor, bus.BatchSubject(0))
	deniedSub(t, c, codec.RoleSensor, bus.OutputSubject(loop))
	// Only the sensor reads the parties' measurement-mask shares (two-hop
	// tick): a party reading the other's would learn V_y.
	deniedSub(t, c, codec.RoleParty0, bus.MaskYSubject(loop))
	deniedSub(t, c, codec.RoleParty1, bus.MaskYSubject(loop))
	deniedSub(t, c, codec.RoleActuator, bus.MaskYSubject(loop))
	// Nor the offline items of the loops named masky, tick and out, whose
	// queue subjects (duet.offline.<loop>) the loop subjects' wildcards
	// (duet.*.masky, ...) match.
	deniedSub(t, c, codec.RoleSensor, bus.OfflineSubject("masky"))
	deniedSub(t, c, codec.RoleActuator, bus.OfflineSubject("tick"))
	deniedSub(t, c, codec.RoleActuator, bus.OfflineSubject("out"))
	// A dealer cannot read party traffic.
	deniedSub(t, c, codec.RoleDealer, bus.PartyInbox(loop, 0))
	deniedSub(t, c, codec.RoleDealer, bus.BatchSubject(1))
	deniedSub(t, c, codec.RoleDealer, bus.OutputSubject(loop))
	deniedSub(t, c, codec.RoleDealer, "duet.>")
	// Nobody reads another role's inbox.
	deniedSub(t, c, codec.RoleParty0, acl.Inbox(codec.RoleParty1)+".>")

	// P0 cannot bind P1's consumer: the request is refused at once with a
	// permission violation naming the subject (not a hang to the timeout).
	nc, errs := connectAs(t, c, codec.RoleParty0)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	st, err := js.Stream(ctx, bus.OfflineStream(loop))
	if err != nil {
		t.Fatalf("P0 may read its stream's info: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.Consumer(ctx, bus.ConsumerName(1))
		done <- err
	}()
	var denied error
	for denied == nil && time.Since(start) < 2*time.Second {
		for _, e := range errs() {
			if errors.Is(e, nats.ErrPermissionViolation) && strings.Contains(e.Error(), "party1") {
				denied = e
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if denied == nil {
		t.Fatal("binding P1's consumer as P0 raised no permission violation")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("denial reported after %v", d)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("P0 bound P1's consumer")
	}
	// A dealer cannot publish a party's exchange messages.
	dn, derrs := connectAs(t, c, codec.RoleDealer)
	dn.Publish(bus.ExchangeSubject(loop, 1), []byte("x"))
	dn.Flush()
	time.Sleep(50 * time.Millisecond)
	found := false
	for _, e := range derrs() {
		found = found || (errors.Is(e, nats.ErrPermissionViolation) && strings.Contains(e.Error(), "Publish"))
	}
	if !found {
		t.Fatal("a dealer published on a party subject without a permission violation")
	}
}

// TestPermissionsDenyForeignPublishes: no role may publish what another
// role sends (a forged measurement, output, exchange message or offline
// item), write a set-up record or another party's state, or read another
// role's set-up record or a party's state through the JetStream API. Each
// attempt is refused by the server with a permission violation naming its
// subject (the records stay sealed either way; this keeps the broker's
// users from even handing them out).
func TestPermissionsDenyForeignPublishes(t *testing.T) {
	c := startACL(t, demo.Options{ACL: true})
	const loop = "pendulum"
	setupKV := func(role codec.Role) string { return "$KV." + bus.SetupBucket + "." + loop + "." + role.String() }
	getSetup := func(role codec.Role) string {
		return "$JS.API.DIRECT.GET.KV_" + bus.SetupBucket + "." + setupKV(role)
	}
	stateKV := func(i int) string { return fmt.Sprintf("$KV.duet-state-party%d.%s", i, loop) }
	getState := func(i int) string { return fmt.Sprintf("$JS.API.DIRECT.GET.KV_duet-state-party%d.%s", i, stateKV(i)) }
	for role, subjects := range map[codec.Role][]string{
		codec.RoleParty0: {bus.MeasureSubject(loop, 1), bus.OfflineSubject(loop), bus.ExchangeSubject(loop, 0),
			setupKV(codec.RoleParty0), getSetup(codec.RoleParty1), getSetup(codec.RoleDealer),
			stateKV(1), getState(1), "$JS.API.STREAM.UPDATE.KV_duet-state-party1"},
		codec.RoleParty1: {bus.MeasureSubject(loop, 0), bus.ExchangeSubject(loop, 1), stateKV(0), getState(0), getSetup(codec.RoleParty0),
			// The queues of the loops named out and masky, whose subjects
			// (duet.offline.out, ...) the loop subjects' wildcards match.
			bus.OfflineSubject("out"), bus.OfflineSubject("masky")},
		codec.RoleActuator: {bus.MeasureSubject(loop, 0), bus.OutputSubject(loop), bus.ExchangeSubject(loop, 1),
			getSetup(codec.RoleParty0), stateKV(0)},
		codec.RoleDealer: {bus.MeasureSubject(loop, 0), bus.OutputSubject(loop), setupKV(codec.RoleParty0), getSetup(codec.RoleParty0), stateKV(1),
			// A consumer of another role's set-up records, or of any
			// (the filter in the request only).
			"$JS.API.CONSUMER.CREATE.KV_" + bus.SetupBucket + ".c." + setupKV(codec.RoleParty0),
			"$JS.API.CONSUMER.CREATE.KV_" + bus.SetupBucket + ".c", "$JS.API.CONSUMER.CREATE.KV_" + bus.SetupBucket},
		codec.RoleSensor: {bus.ExchangeSubject(loop, 0), bus.OutputSubject(loop), bus.MaskYSubject(loop), stateKV(0), getState(1),
			getSetup(codec.RoleParty0), bus.OfflineSubject(loop), bus.OfflineSubject("tick")},
		codec.RolePlant: {bus.MeasureSubject(loop, 0), bus.OutputSubject(loop), bus.PlantUSubject(loop)},
	} {
		nc, errs := connectAs(t, c, role)
		for _, subj := range subjects {
			if err := nc.Publish(subj, []byte("x")); err != nil {
				t.Fatalf("%s publish %s: %v", role, subj, err)
			}
		}
		if err := nc.FlushTimeout(2 * time.Second); err != nil {
			t.Fatal(err)
		}
		for _, subj := range subjects {
			found := false
			for deadline := time.Now().Add(2 * time.Second); !found && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				for _, e := range errs() {
					found = found || errors.Is(e, nats.ErrPermissionViolation) && strings.Contains(e.Error(), "Publish") && strings.Contains(e.Error(), `"`+subj+`"`)
				}
			}
			if !found {
				t.Errorf("%s published on %s without a permission violation", role, subj)
			}
		}
	}
}

func TestConfigRendersEveryRole(t *testing.T) {
	users, err := acl.NewUsers()
	if err != nil {
		t.Fatal(err)
	}
	conf := acl.Config(acl.Publics(users))
	for _, r := range codec.AllRoles {
		if !strings.Contains(conf, users[r].Pub) || !strings.Contains(conf, acl.Inbox(r)) {
			t.Errorf("config lacks %s's user or inbox", r)
		}
	}
	if !strings.Contains(conf, "allow_responses") {
		t.Error("config lacks the plant's response permission")
	}
}

// The loop runs over TLS, with the parties' writes sent at once and
// coalesced (TLS then runs over the coalescing connection; 2 ms, so that
// ticks a few milliseconds apart spend the burst and writes are held).
func TestLoopOverTLS(t *testing.T) {
	for _, every := range []time.Duration{-1, 2 * time.Millisecond} {
		t.Run(fmt.Sprintf("write-coalesce=%v", max(0, every)), func(t *testing.T) { loopOverTLS(t, every) })
	}
}

func loopOverTLS(t *testing.T, coalesce time.Duration) {
	dir := t.TempDir()
	if err := acl.GenerateTLS(dir, []string{"localhost", "127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	srv, err := acl.ServerTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := acl.ClientTLS(dir + "/" + acl.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	c := startACL(t, demo.Options{ACL: true, TLS: srv, ClientTLS: cli, WriteCoalesce: coalesce})
	// A client without the CA cannot connect.
	if nc, err := nats.Connect(c.URL(), c.User(codec.RoleSensor).Options()...); err == nil {
		nc.Close()
		t.Fatal("connected without TLS")
	}
	if err := c.RunTicks(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if s := demo.Summarize(c.Records()); s.Applied < 99 || s.Misses > 1 {
		t.Fatalf("over TLS: %d of 100 applied, %d misses", s.Applied, s.Misses)
	}
}

// TestDealerConsumerTakesItsFilterOnly: the one consumer-create subject a
// dealer may publish on names the dealer records' filter, and the server
// refuses a create whose configuration asks for another (a filter of every
// record, or several filters): so a dealer cannot have a consumer deliver
// another role's set-up record. With the filter of its subject, the create
// succeeds.
func TestDealerConsumerTakesItsFilterOnly(t *testing.T) {
	c := startACL(t, demo.Options{ACL: true})
	nc, errs := connectAs(t, c, codec.RoleDealer)
	subject := "$JS.API.CONSUMER.CREATE.KV_" + bus.SetupBucket + ".probe." + bus.DealerSetupFilter
	for _, tc := range []struct {
		name   string
		config string
		ok     bool
	}{
		{"every record", `"filter_subject":"$KV.` + bus.SetupBucket + `.>"`, false},
		{"party0's records", `"filter_subject":"$KV.` + bus.SetupBucket + `.*.party0"`, false},
		{"several filters", `"filter_subjects":["` + bus.DealerSetupFilter + `","$KV.` + bus.SetupBucket + `.*.party0"]`, false},
		{"the dealer records", `"filter_subject":"` + bus.DealerSetupFilter + `"`, true},
	} {
		req := `{"stream_name":"KV_` + bus.SetupBucket + `","config":{"name":"probe","ack_policy":"none","deliver_policy":"last_per_subject",` + tc.config + `}}`
		msg, err := nc.Request(subject, []byte(req), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v (async errors %v)", tc.name, err, errs())
		}
		var resp struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			t.Fatalf("%s: %v in %s", tc.name, err, msg.Data)
		}
		if (resp.Error == nil) != tc.ok {
			t.Errorf("%s: response %s; want it %s", tc.name, msg.Data, map[bool]string{true: "created", false: "refused"}[tc.ok])
		}
	}
}
