package bench

import (
	"context"
	"errors"
	"net"

	"github.com/nats-io/nats.go"
)

// In-process connections (duet bench --in-process, ScaleOptions.InProcess).
// By default every connection of the scale search, the loops' services' and
// the floor's, reaches the embedded server over loopback TCP, as separate
// processes reach a broker: each message is a write system call, a wake-up
// of the server's reader, a write and a wake-up of the receiver's. With
// InProcess they reach it through an in-memory pipe (net.Pipe, the
// server's InProcessConn): the same NATS protocol, the same server, the
// same clients, without the kernel. What the two differ by is the cost of
// loopback TCP on this machine; no deployment of separate processes can
// connect this way.

// ErrInProcess: in-process connections were asked for where a process
// other than the bench's takes part.
var ErrInProcess = errors.New("bench: in-process connections need the embedded NATS server and the parties inside the bench (not with --nats or --party-bin): another process cannot share the bench's memory")

// brokerPipe hands a NATS client an in-process connection to srv. The
// server starts the connection's read and write loops from the goroutine
// that asks for it, and they inherit its labels; brokerPipe asks from a
// goroutine of its own labelled as the broker (roles.go), so that they
// count as the server's, as a TCP connection's (started by the server's
// accept loop) do. Not from the caller's goroutine under withRole: that
// leaves the caller with ctx's labels, not its own (pprof.Do restores
// ctx's), and the client's reader and flusher, which the caller starts
// next, would lose the client's role.
type brokerPipe struct {
	ctx context.Context
	srv nats.InProcessConnProvider
}

func (p brokerPipe) InProcessConn() (net.Conn, error) {
	type pipe struct {
		c   net.Conn
		err error
	}
	ch := make(chan pipe, 1)
	go withRole(p.ctx, RoleBroker, func(context.Context) {
		c, err := p.srv.InProcessConn()
		ch <- pipe{c, err}
	})
	r := <-ch
	return r.c, r.err
}

// dialOptions are the options that connect a client through srv in
// process; none (loopback TCP to the URL) when srv is nil.
func dialOptions(ctx context.Context, srv nats.InProcessConnProvider) []nats.Option {
	if srv == nil {
		return nil
	}
	return []nats.Option{nats.InProcessServer(brokerPipe{ctx: ctx, srv: srv})}
}
