// Package service is the common skeleton of the duet service binaries:
// configuration, logging, keys, the NATS connection, the HTTP endpoints
// (/metrics, /healthz, /readyz) and graceful shutdown on SIGTERM.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/acl"
	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/keys"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
)

// Env is what a service's Run gets.
type Env struct {
	// Identity is the role's own end-to-end key (for deriving state keys).
	Identity *codec.Identity
	NC       *nats.Conn
	Sealer   *codec.Sealer
	Metrics  *metrics.Set
	Log      *slog.Logger
	// Ready is set by the service to report readiness (/readyz): connected,
	// keys loaded and state restored.
	Ready atomic.Pointer[func() bool]
}

// Main runs a service binary and exits the process.
func Main(name string, role func() codec.Role, cfg any, common *config.Common, run func(ctx context.Context, env *Env) error) {
	TuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal asks the service to stop (a party still flushes its
	// state); once it has, the signals are let go, so that a second Ctrl-C
	// or SIGTERM ends a shutdown that takes too long, as `duet` does. Before,
	// they were held until Run returned, and a second one did nothing.
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := Run(ctx, name, role, cfg, common, os.Args[1:], run)
	stop()
	if errors.Is(err, config.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Run is Main without the process exit (testable).
func Run(ctx context.Context, name string, roleOf func() codec.Role, cfg any, common *config.Common, args []string, run func(ctx context.Context, env *Env) error) error {
	if err := config.Load(cfg, args, os.Stdout); err != nil {
		return err
	}
	role := roleOf()
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(common.LogLevel)) // checked by config.Load (Common.Validate)
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("service", name)
	// The HTTP endpoints' address is bound first, so that a bad or busy one
	// stops the service as an invalid value does: served from a goroutine,
	// its error was only logged, and the service ran without /metrics and
	// /readyz, which its probes then failed.
	var ln net.Listener
	if common.HTTPAddr != "" {
		var err error
		if ln, err = net.Listen("tcp", common.HTTPAddr); err != nil {
			return fmt.Errorf("config: DUET_HTTP_ADDR %q: %w", common.HTTPAddr, err)
		}
		defer ln.Close() // also when the server has it: closing twice is harmless
	}
	// The CA file is read and checked before anything else reads files,
	// so that a wrong one is named as such.
	var tlsOpt nats.Option
	if common.TLSCA != "" {
		tc, err := acl.ClientTLS(common.TLSCA)
		if err != nil {
			return fmt.Errorf("config: DUET_TLS_CA: %w", err)
		}
		tlsOpt = nats.Secure(tc)
	}
	id, pubs, err := keys.Load(common.KeysDir, role)
	if err != nil {
		return err
	}
	sealer, err := codec.NewSealer(role, id, pubs)
	if err != nil {
		return err
	}
	m := metrics.New(role.String()) // the service label: party0 and party1, not "party"
	opts := []nats.Option{nats.CustomInboxPrefix(acl.Inbox(role))}
	if common.Creds != "" {
		u, err := acl.LoadUser(common.Creds, role)
		if err != nil {
			return fmt.Errorf("config: DUET_NATS_CREDS: %w", err)
		}
		opts = append(opts, u.Options()...)
	}
	if tlsOpt != nil {
		opts = append(opts, tlsOpt)
	}
	if o, ok := cfg.(interface{ NATSOptions() []nats.Option }); ok {
		opts = append(opts, o.NATSOptions()...) // the service's own (the party's write coalescing)
	}
	opts = append(opts, bus.CountAsyncErrors(m.CountNATSError))
	// A connection that nats.go closes for good (a server's error it does
	// not retry after, such as its maximum control line exceeded) ends
	// the service with an error, so that it is restarted: it would
	// otherwise stay up, not ready, and never connect again.
	rctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	var draining atomic.Bool
	opts = append(opts, nats.ClosedHandler(func(c *nats.Conn) {
		if !draining.Load() {
			lost(fmt.Errorf("nats connection closed for good, not by this service: %v", c.LastError()))
		}
	}))
	nc, err := bus.Connect(strings.TrimSpace(common.NATSURL), "duet-"+name, log, func() { m.Reconnects.Inc() }, opts...)
	if err != nil {
		return err
	}
	env := &Env{Identity: id, NC: nc, Sealer: sealer, Metrics: m, Log: log}
	if ln != nil {
		srv := newHTTPServer(mux(env))
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server", "err", err)
			}
		}()
		defer srv.Close()
	}
	log.Info("starting", "nats", bus.RedactURL(common.NATSURL), "role", role.String())
	err = run(rctx, env)
	if cause := context.Cause(rctx); ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		log.Error("stopping", "err", cause)
		err = errors.Join(cause, err)
	}
	// Graceful: the run function has finished its tick in flight; drain NATS.
	draining.Store(true)
	if derr := nc.Drain(); derr != nil {
		nc.Close()
	}
	for i := 0; i < 50 && !nc.IsClosed(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	log.Info("stopped")
	return err
}

// TuneGC makes the collector run less often unless GOGC is set: a tick
// allocates a few kilobytes, and with many loops per process the default
// (GOGC=100) spends its pauses on the latency path. The heap stays small
// (tens of megabytes) either way.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

// The HTTP server's limits: a client that sends its request slowly, reads
// the answer slowly or keeps an idle connection open does not hold a
// connection and a goroutine for ever (anyone who reaches the port could
// otherwise run the process out of file descriptors).
var (
	httpReadTimeout  = 10 * time.Second
	httpWriteTimeout = 30 * time.Second
	httpIdleTimeout  = 60 * time.Second
)

// newHTTPServer is the server of /metrics, /healthz and /readyz.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: httpReadTimeout,
		WriteTimeout: httpWriteTimeout, IdleTimeout: httpIdleTimeout}
}

func mux(env *Env) http.Handler {
	m := http.NewServeMux()
	m.Handle("/metrics", env.Metrics.Handler())
	m.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if env.NC.IsClosed() { // for good: the service stops (Run)
			http.Error(w, "nats connection closed", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	m.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready := env.NC.IsConnected()
		if f := env.Ready.Load(); ready && f != nil {
			ready = (*f)()
		} else if f == nil {
			ready = false
		}
		if !ready {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	return m
}
