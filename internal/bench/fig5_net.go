package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// The Fig. 5 bench's client and party responders on NATS, and the key pairs
// every bench client uses.

// identities holds one key pair per role, for the bench's own clients and
// services, and one sealer per role (a Sealer is immutable and safe for
// concurrent use; building one costs a scalar multiplication per peer).
type identities struct {
	ids  map[codec.Role]*codec.Identity
	pubs map[codec.Role]string

	mu      sync.Mutex
	sealers map[codec.Role]*codec.Sealer
}

func newIdentities() (*identities, error) {
	x := &identities{ids: map[codec.Role]*codec.Identity{}, pubs: map[codec.Role]string{}, sealers: map[codec.Role]*codec.Sealer{}}
	for _, r := range codec.AllRoles {
		id, err := codec.GenerateIdentity()
		if err != nil {
			return nil, err
		}
		x.ids[r], x.pubs[r] = id, id.PublicKey()
	}
	return x, nil
}

func (x *identities) sealer(r codec.Role) (*codec.Sealer, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.sealers[r]; s != nil {
		return s, nil
	}
	s, err := codec.NewSealer(r, x.ids[r], x.pubs)
	if err != nil {
		return nil, err
	}
	x.sealers[r] = s
	return s, nil
}

// fig5Client plays the client: the sensor's role to send, the actuator's to
// receive, each on its own connection (as the floor's sensor and actuator).
type fig5Client struct {
	send, recv   *nats.Conn
	sealS, sealA *codec.Sealer
	loop         string
	f            *mpc.Field
	guard        *codec.ReplayGuard

	mu      sync.Mutex
	cur     uint64
	have    [2]bool
	doneAt  time.Time // when the second output share of cur was opened
	out     [2]mpc.Matrix
	done    chan uint64
	lastLen int // last measure envelope length
	err     error
}

func newFig5Client(url string, ids *identities, loop string, f *mpc.Field, rows int) (*fig5Client, error) {
	c := &fig5Client{loop: loop, f: f, guard: codec.NewReplayGuard(), done: make(chan uint64, 4)}
	var err error
	if c.sealS, err = ids.sealer(codec.RoleSensor); err != nil {
		return nil, err
	}
	if c.sealA, err = ids.sealer(codec.RoleActuator); err != nil {
		return nil, err
	}
	for i := range c.out {
		c.out[i] = mpc.NewMatrix(rows, 1)
	}
	if c.send, err = nats.Connect(url, nats.Name("duet-bench-client-send")); err != nil {
		return nil, err
	}
	if c.recv, err = nats.Connect(url, nats.Name("duet-bench-client-recv")); err != nil {
		c.send.Close()
		return nil, err
	}
	if _, err := c.recv.Subscribe(bus.OutputSubject(loop), c.onOutput); err != nil {
		c.close()
		return nil, err
	}
	if err := c.recv.Flush(); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *fig5Client) close() {
	c.send.Close()
	c.recv.Close()
}

func (c *fig5Client) onOutput(m *nats.Msg) {
	h, body, err := c.sealA.Open(m.Data)
	if err == nil && (h.Kind != codec.KindOutput || h.Loop != c.loop) {
		err = fmt.Errorf("%w: %s for loop %s", codec.ErrKind, h.Kind, h.Loop)
	}
	if err == nil {
		err = c.guard.Accept(h)
	}
	var op codec.OutputPayload
	if err == nil {
		err = codec.Unmarshal(body, &op)
	}
	id, _ := h.From.PartyID()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && h.Tick == c.cur && !c.have[id] {
		err = op.U.DecodeInto(c.f, c.out[id])
		c.have[id] = err == nil
	}
	if err != nil {
		c.err = err
		return
	}
	if c.have[0] && c.have[1] {
		c.have = [2]bool{}
		c.doneAt = time.Now() // stamped here, as the actuator and the floor stamp
		select {
		case c.done <- h.Tick:
		default:
		}
	}
}

// roundTrip sends y0, y1 for repetition t and returns the reconstructed
// output and the time from sealing the first input share to opening the
// second output share.
func (c *fig5Client) roundTrip(ctx context.Context, t uint64, y0, y1 mpc.Matrix) (mpc.Matrix, time.Duration, error) {
	c.mu.Lock()
	c.cur, c.have = t, [2]bool{}
	c.mu.Unlock()
	start := time.Now()
	for i, y := range []mpc.Matrix{y0, y1} {
		body, err := codec.Marshal(codec.MeasurePayload{Y: codec.PutMatrix(c.f, y), SentUnixNano: start.UnixNano()})
		if err != nil {
			return mpc.Matrix{}, 0, err
		}
		env, err := c.sealS.Seal(codec.Header{Kind: codec.KindMeasure, Loop: c.loop, Tick: t, From: codec.RoleSensor, To: codec.PartyRole(i)}, body)
		if err != nil {
			return mpc.Matrix{}, 0, err
		}
		c.lastLen = len(env)
		if err := c.send.Publish(bus.MeasureSubject(c.loop, i), env); err != nil {
			return mpc.Matrix{}, 0, err
		}
	}
	timer := time.NewTimer(2 * time.Second)
	defer timer.Stop()
	for {
		select {
		case got := <-c.done:
			if got != t {
				continue
			}
			z := mpc.NewMatrix(c.out[0].Rows, 1)
			c.mu.Lock()
			took := c.doneAt.Sub(start)
			c.f.Reconst(z, c.out[0], c.out[1])
			c.mu.Unlock()
			return z, took, nil
		case <-timer.C:
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			return mpc.Matrix{}, 0, fmt.Errorf("bench: repetition %d timed out (client error: %v)", t, err)
		case <-ctx.Done():
			return mpc.Matrix{}, 0, ctx.Err()
		}
	}
}

func (c *fig5Client) measureBytes() int { return c.lastLen }

// responder is one party of the Fig. 5 bench: it opens what arrives on its
// inbox (one subscription, as the party service), applies replay protection
// and hands the payload to the protocol logic, in the subscription's
// goroutine.
type responder struct {
	id     int
	nc     *nats.Conn
	sealer *codec.Sealer
	guard  *codec.ReplayGuard
	loop   string
	logic  partyLogic

	mu              sync.Mutex
	err             error
	ticks           int
	sent            int // envelope bytes sent
	exchLen, outLen int
}

func startResponder(url string, ids *identities, loop string, id int, logic partyLogic) (*responder, error) {
	s, err := ids.sealer(codec.PartyRole(id))
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("duet-bench-party%d", id)))
	if err != nil {
		return nil, err
	}
	r := &responder{id: id, nc: nc, sealer: s, guard: codec.NewReplayGuard(), loop: loop, logic: logic}
	if _, err := nc.Subscribe(bus.PartyInbox(loop, id), r.onMsg); err != nil {
		nc.Close()
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	return r, nil
}

func (r *responder) close() { r.nc.Close() }

func (r *responder) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
}

func (r *responder) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *responder) onMsg(m *nats.Msg) {
	h, body, err := r.sealer.Open(m.Data)
	if err == nil && h.Loop != r.loop {
		err = fmt.Errorf("%w: loop %q", codec.ErrHeader, h.Loop)
	}
	if err == nil {
		err = r.guard.Accept(h)
	}
	if err != nil {
		r.fail(err)
		return
	}
	if h.Kind == codec.KindMeasure {
		var mp codec.MeasurePayload
		if err = codec.Unmarshal(body, &mp); err == nil {
			r.mu.Lock()
			r.ticks++
			r.mu.Unlock()
			err = r.logic.measure(r, h.Tick, mp.Y)
		}
	} else {
		err = r.logic.peer(r, h, body)
	}
	if err != nil {
		r.fail(err)
	}
}

// send seals and publishes a payload: KindOutput to the client, anything
// else to the other party.
func (r *responder) send(kind codec.Kind, t uint64, payload any) error {
	body, err := codec.Marshal(payload)
	if err != nil {
		return err
	}
	to, subj := codec.PartyRole(1-r.id), bus.ExchangeSubject(r.loop, 1-r.id)
	if kind == codec.KindOutput {
		to, subj = codec.RoleActuator, bus.OutputSubject(r.loop)
	}
	env, err := r.sealer.Seal(codec.Header{Kind: kind, Loop: r.loop, Tick: t, From: r.sealer.Self(), To: to}, body)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.sent += len(env)
	if kind == codec.KindOutput {
		r.outLen = len(env)
	} else {
		r.exchLen = len(env)
	}
	r.mu.Unlock()
	return r.nc.Publish(subj, env)
}

func (r *responder) bytesPerTick() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ticks == 0 {
		return 0
	}
	return r.sent / r.ticks
}

func (r *responder) exchangeBytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exchLen
}

func (r *responder) outputBytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outLen
}
