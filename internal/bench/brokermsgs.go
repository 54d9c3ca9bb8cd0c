package bench

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// brokerCounts is what the embedded NATS server has received and sent: in
// all (its own counters, which include JetStream's internal deliveries,
// such as a stored message's acknowledgement) and by client connection name
// (the open connections only; the rig names its connections by role).
type brokerCounts struct {
	in, out int64
	conns   map[string]connCount
}

type connCount struct{ inMsgs, outMsgs, inBytes, outBytes int64 }

// readBroker reads s's counters; a nil s (the server runs in another
// process) reads nothing.
func readBroker(s *server.Server) (brokerCounts, error) {
	if s == nil {
		return brokerCounts{}, nil
	}
	v, err := s.Varz(nil)
	if err != nil {
		return brokerCounts{}, fmt.Errorf("the server's counters: %w", err)
	}
	c, err := s.Connz(&server.ConnzOptions{Limit: math.MaxInt32})
	if err != nil {
		return brokerCounts{}, fmt.Errorf("the server's connections: %w", err)
	}
	b := brokerCounts{in: v.InMsgs, out: v.OutMsgs, conns: make(map[string]connCount, len(c.Conns))}
	for _, ci := range c.Conns {
		cc := b.conns[ci.Name]
		cc.inMsgs += ci.InMsgs
		cc.outMsgs += ci.OutMsgs
		cc.inBytes += ci.InBytes
		cc.outBytes += ci.OutBytes
		b.conns[ci.Name] = cc
	}
	return b, nil
}

// perTickSince is the messages the server received and sent per tick
// between a and b (NaN, NaN without a server of this process's).
func (b brokerCounts) perTickSince(a brokerCounts, ticks int) (in, out float64) {
	if b.conns == nil || a.conns == nil || ticks <= 0 {
		return math.NaN(), math.NaN()
	}
	return float64(b.in-a.in) / float64(ticks), float64(b.out-a.out) / float64(ticks)
}

// writeConnCounts writes, per connection name, what the server received
// from and sent to it per tick between a and b, the busiest first, after
// the server's own totals (the difference between those and the sum of the
// connections' is JetStream's internal clients and the connections that
// closed meanwhile).
func writeConnCounts(path string, a, b brokerCounts, ticks int) error {
	if b.conns == nil || a.conns == nil || ticks <= 0 {
		return nil
	}
	type row struct {
		name string
		d    connCount
	}
	var rows []row
	for name, cb := range b.conns {
		ca := a.conns[name]
		d := connCount{cb.inMsgs - ca.inMsgs, cb.outMsgs - ca.outMsgs, cb.inBytes - ca.inBytes, cb.outBytes - ca.outBytes}
		if d != (connCount{}) {
			rows = append(rows, row{name, d})
		}
	}
	slices.SortFunc(rows, func(x, y row) int {
		if c := (y.d.inMsgs + y.d.outMsgs) - (x.d.inMsgs + x.d.outMsgs); c != 0 {
			return int(max(-1, min(1, c)))
		}
		return strings.Compare(x.name, y.name)
	})
	t := float64(ticks)
	var s strings.Builder
	s.WriteString("connection,in_msgs_per_tick,out_msgs_per_tick,in_bytes_per_tick,out_bytes_per_tick\n")
	in, out := b.perTickSince(a, ticks)
	fmt.Fprintf(&s, "(server),%.3f,%.3f,,\n", in, out)
	for _, r := range rows {
		fmt.Fprintf(&s, "%s,%.3f,%.3f,%.1f,%.1f\n", r.name, float64(r.d.inMsgs)/t, float64(r.d.outMsgs)/t, float64(r.d.inBytes)/t, float64(r.d.outBytes)/t)
	}
	return os.WriteFile(path, []byte(s.String()), 0o644)
}
