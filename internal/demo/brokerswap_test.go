package demo

import (
	"bufio"
	"context"
	"io"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

// The broker assigns the stream sequences that pair the parties' offline
// items, so a malicious one can hand the two parties different messages
// under one sequence. Here a proxy in front of party1 plays that broker: it
// relays every byte, but hands party1, under the sequence of an offline
// item message, the message stored after it. The parties must find that
// they hold different items (the serials they exchange differ) and give the
// tick up before computing on them: an output share or state update from
// two different items would be wrong, with nothing counted. No wrong u may
// be applied, the loop must go on, and every tick completed must have used
// one item on both sides.
func TestBrokerSwapsAnItemForOneParty(t *testing.T) {
	for _, twoHop := range []bool{false, true} {
		name := "three-hop"
		if twoHop {
			name = "two-hop"
		}
		t.Run(name, func(t *testing.T) {
			const loop = "pendulum" // the cluster's loop id
			// A stable plant, not the pendulum: the ticks given up around
			// each swap (zero input for a third of a second) may topple the
			// pendulum, and then every measurement leaves the controller's
			// range, which says nothing about the parties.
			cs, ps := stableLoop()
			px := &swapProxy{t: t, stream: bus.OfflineStream(loop)}
			const perMsg = 8 // the sensor's default items per stream message
			c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: true, Fast: true, TwoHop: twoHop, ItemsPerMsg: perMsg,
				Period: 40 * time.Millisecond, Deadline: 250 * time.Millisecond, Dealers: 1, LowWater: 100,
				Dial: func(name, url string) string {
					if name != "party1" {
						return url
					}
					return px.listen(url)
				}}, 50)
			ctx := context.Background()
			const swaps = 3
			ticks := 100
			if err := c.RunTicks(ctx, 100); err != nil {
				t.Fatal(err)
			}
			for i := range swaps {
				px.armed.Store(true)
				if err := c.RunTicks(ctx, 100); err != nil {
					t.Fatal(err)
				}
				ticks += 100
				if n := px.swapped.Load(); n != int64(i+1) {
					t.Fatalf("%d messages swapped, want %d (party1 was handed no offline item in 100 ticks?)", n, i+1)
				}
			}
			// Past the items party1 holds ahead (the swapped message may wait
			// behind two pulls of them), and 100 more.
			const after = 400
			if err := c.RunTicks(ctx, after); err != nil {
				t.Fatal(err)
			}
			ticks += after
			mismatches := func(svc string) float64 {
				return testutil.ToFloat64(c.Metrics[svc].Mismatches.WithLabelValues(loop, "item"))
			}
			m0, m1 := mismatches("party0"), mismatches("party1")
			if m0 < swaps || m1 < swaps {
				t.Errorf("item mismatches counted: party0 %v, party1 %v; want >= %d each (one a swap at least)", m0, m1, swaps)
			}
			// The genuine message, at the next sequence, holds items party1
			// has taken (in the swapped one): it refuses them as copies.
			if r := counter(c, "party1", "replay"); r < swaps {
				t.Errorf("party1 refused %v items as copies, want >= %d (the swapped-in items delivered again)", r, swaps)
			}
			recs := followed(t, c)
			s := Summarize(recs)
			// Each item of the swapped message is a mismatch, and party1
			// passes over the genuine one's: a tick given up for each, and
			// some to resynchronize (9 to 18 a swap in most runs, once 48 on
			// a loaded machine). What matters is that no wrong u is applied
			// and that the loop recovers: the last 100 ticks run clean.
			last := lastTick(c)
			if bound := sim.OutputBound(cs, c.Sensor.Resolved()); s.MaxDiff > bound {
				t.Fatalf("a wrong u applied: max |u - u_plain| %g (bound %g)", s.MaxDiff, bound)
			}
			if n := missesBetween(recs, last-99, last+1); n > 5 {
				for _, svc := range []string{"sensor", "party0", "party1"} {
					m := c.Metrics[svc]
					t.Logf("%s: abandoned %v, rejects %v, paths %v", svc, metrics.SumBy(m.Abandoned, "reason"),
						metrics.SumBy(m.Rejects, "reason"), metrics.SumBy(m.TickPaths, "path"))
				}
				t.Fatalf("the loop did not recover: %d misses in its last 100 ticks (%d of %d in all)", n, s.Misses, ticks)
			}
			checkAudit(t, c, ticks/2)
			t.Logf("%d swaps: item mismatches party0 %v party1 %v, party1 replays %v, %d misses of %d ticks, max |u - u_plain| %.3g",
				swaps, m0, m1, counter(c, "party1", "replay"), s.Misses, ticks, s.MaxDiff)
		})
	}
}

// swapProxy stands between one service and the NATS server, relaying both
// ways. From the server to the service it parses the protocol: each
// JetStream delivery of stream (a message whose reply subject is a
// $JS.ACK subject naming it) is passed on as it is, unless the proxy is
// armed; then the delivery of sequence k is handed on with the body of the
// message stored at k+1 (read by the proxy's own connection), and the proxy
// disarms. Everything else passes untouched.
type swapProxy struct {
	t       *testing.T
	stream  string
	armed   atomic.Bool
	swapped atomic.Int64

	mu   sync.Mutex
	addr string // the proxy's URL, once listening
	js   jetstream.JetStream
	st   jetstream.Stream
}

// listen starts the proxy in front of the server at serverURL, once, and
// returns the proxy's URL.
func (p *swapProxy) listen(serverURL string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.addr != "" {
		return p.addr
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		p.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.t.Fatal(err)
	}
	nc, err := nats.Connect(serverURL)
	if err != nil {
		p.t.Fatal(err)
	}
	if p.js, err = jetstream.New(nc); err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { ln.Close(); nc.Close() })
	go func() {
		for {
			cl, err := ln.Accept()
			if err != nil {
				return
			}
			srv, err := net.Dial("tcp", u.Host)
			if err != nil {
				cl.Close()
				continue
			}
			go func() { _, _ = io.Copy(srv, cl); srv.Close() }()
			go p.relay(cl, bufio.NewReader(srv))
		}
	}()
	p.addr = "nats://" + ln.Addr().String()
	return p.addr
}

// relay copies the server's protocol to dst, substituting as armed.
func (p *swapProxy) relay(dst net.Conn, src *bufio.Reader) {
	defer dst.Close()
	for {
		line, err := src.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		if len(f) < 4 || (f[0] != "MSG" && f[0] != "HMSG") {
			if _, err := io.WriteString(dst, line); err != nil {
				return
			}
			continue
		}
		// MSG <subject> <sid> [reply] <size>; HMSG ... [reply] <header size> <size>
		size, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			return
		}
		payload := make([]byte, size+2) // and its CRLF
		if _, err := io.ReadFull(src, payload); err != nil {
			return
		}
		hdr, fixed := 0, 4
		if f[0] == "HMSG" {
			if hdr, err = strconv.Atoi(f[len(f)-2]); err != nil {
				return
			}
			fixed = 5
		}
		if len(f) == fixed+1 {
			if body, ok := p.substitute(f[3]); ok {
				payload = append(append(payload[:hdr:hdr], body...), '\r', '\n')
				f[len(f)-1] = strconv.Itoa(len(payload) - 2)
				line = strings.Join(f, " ") + "\r\n"
			}
		}
		if _, err := io.WriteString(dst, line); err != nil {
			return
		}
		if _, err := dst.Write(payload); err != nil {
			return
		}
	}
}

// substitute returns the body to deliver instead, for a delivery with this
// reply subject: the next stored message's, when armed and the delivery is
// of the stream.
func (p *swapProxy) substitute(reply string) ([]byte, bool) {
	if !p.armed.Load() || !strings.HasPrefix(reply, "$JS.ACK.") {
		return nil, false
	}
	// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>,
	// or with the domain and account hash after ACK and a token at the end.
	tok := strings.Split(reply, ".")
	var stream, seq string
	switch {
	case len(tok) == 9:
		stream, seq = tok[2], tok[5]
	case len(tok) >= 12:
		stream, seq = tok[4], tok[7]
	default:
		return nil, false
	}
	k, err := strconv.ParseUint(seq, 10, 64)
	if stream != p.stream || err != nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p.mu.Lock()
	if p.st == nil {
		p.st, err = p.js.Stream(ctx, p.stream)
	}
	st := p.st
	p.mu.Unlock()
	if err != nil {
		return nil, false
	}
	next, err := st.GetMsg(ctx, k+1)
	if err != nil { // not stored yet: the next delivery, then
		return nil, false
	}
	p.armed.Store(false)
	p.swapped.Add(1)
	return next.Data, true
}

// stableLoop is a one-state controller and a stable plant that rings down
// slowly from y = 100 (inside the controller's range, |y| < 256, with any
// input), as the benchmark's random controllers run against
// (internal/bench.BenchPlant).
func stableLoop() (mpc.ControllerSpec, plant.Spec) {
	r, th := 0.999, 0.1
	c, s := r*math.Cos(th), r*math.Sin(th)
	return mpc.ControllerSpec{A: [][]float64{{0.5}}, B: [][]float64{{0.25}}, C: [][]float64{{0.25}}, D: [][]float64{{0.125}},
			X0: []float64{0}, K: 18, L: 9, Lambda: mpc.DefaultLambda, Modulus: mpc.ModulusAuto},
		plant.Spec{Kind: plant.KindLTI, A: [][]float64{{c, -s}, {s, c}}, B: [][]float64{{1e-4}, {0}}, C: [][]float64{{1, 0}}, X0: []float64{100, 0}}
}
