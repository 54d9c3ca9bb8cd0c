package party

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
)

// DefaultPrefetch is DUET_PREFETCH's default and MaxPrefetch its largest
// value.
const (
	DefaultPrefetch = 64
	MaxPrefetch     = 100000
)

// minPersistDelay is the shortest DUET_PERSIST_DELAY above 0.
const minPersistDelay = 100 * time.Microsecond

// PrefetchFor is the prefetch a party uses for Options.Prefetch n (0 or
// less: the default).
func PrefetchFor(n int) int {
	if n <= 0 {
		return DefaultPrefetch
	}
	return n
}

// Config is the party service's environment.
type Config struct {
	config.Common
	Party          int           `envconfig:"PARTY" required:"true" desc:"which party this is: 0 or 1"`
	Loops          []string      `envconfig:"LOOPS" default:"pendulum" desc:"comma-separated loop ids served"`
	Prefetch       int           `envconfig:"PREFETCH" default:"64" desc:"offline items requested per pull, per loop, 1..100000, rounded up to whole stream messages (a loop holds up to about three times this many)"`
	ItemWait       time.Duration `envconfig:"ITEM_WAIT" default:"20ms" desc:"how long a tick waits for an offline item before it is abandoned (more than 0, at most 1s)"`
	Persist        bool          `envconfig:"PERSIST" default:"true" desc:"persist the state share every tick (sealed) for crash recovery without controller reset"`
	StateFileStore bool          `envconfig:"STATE_FILE_STORE" default:"true" desc:"JetStream file storage for the persisted state"`
	StateReplicas  int           `envconfig:"STATE_REPLICAS" default:"1" desc:"JetStream replicas of the persisted state, 1..5 and at most the NATS servers in the cluster (it and DUET_STATE_FILE_STORE configure the bucket duet-state-party<i>, which every process of this party shares: set both alike on all; a process started with another replica count changes the bucket's to its own, with a warning naming both, and one with the other storage is refused by the server: its loops stop, naming both variables)"`
	PersistDelay   time.Duration `envconfig:"PERSIST_DELAY" default:"2ms" desc:"the longest a tick's state write waits to start (off the tick's critical path), gathered with the writes of the other loops' ticks in that window (0, or 100µs..1s; 0: each at once); the next tick waits for the write. While other loops' writes are waiting, P0's Protocol 2 message of a loop ticking at least five times this apart waits for the same window. Keep it well under the loops' tick period (the sensor's DUET_PERIOD): at or above it the next tick starts first and makes the write at its start, on its critical path, and the two-hop tick's pre-opening comes too late"`
	WriteCoalesce  time.Duration `envconfig:"WRITE_COALESCE" default:"0" desc:"the party's writes to NATS: after a burst of 4 at once, at most one system call per this interval, the writes in between going out together (fewer system calls with hundreds of loops, at most this much added per message and only while that busy; 250us was measured, see README; 0..10ms, 0: every write at once)"`
	TwoHop         bool          `envconfig:"TWO_HOP" default:"false" desc:"the two-hop tick: between ticks, open the state part of the exchange with the other party and send the sensor this party's share of the next item's measurement mask, so that a tick with the sensor's masked measurement needs no exchange after it (docs/two-hop-design.md; with persistence, the mask share once the tick's state write is acknowledged); set on both parties and the sensor (while the sensor sends shares instead, 50 ticks in a row, a party pre-opens only after every 25th tick)"`
	PeerBatch      int           `envconfig:"PEER_BATCH" default:"16" desc:"most messages to the other party sent as one NATS message while more inbound messages wait, 1..256 (1: never batch; set 1 while one party still runs a release without batches)"`
}

// DefaultWriteCoalesce is DUET_WRITE_COALESCE's default (bus.CoalesceWrites):
// off. Coalescing trades latency at moderate load for fewer system calls at
// high load, and on the 2-core machine it was measured on it did not change
// which loop counts hold with persistence (README, Measured results).
const DefaultWriteCoalesce = time.Duration(0)

// MaxWriteCoalesce bounds DUET_WRITE_COALESCE (and `duet bench
// --write-coalesce`): the most a write may be held.
const MaxWriteCoalesce = 10 * time.Millisecond

// WriteCoalesceFor is the interval for a harness's setting (the bench's and
// the demo's parties): 0 is DefaultWriteCoalesce, negative is off (0).
func WriteCoalesceFor(setting time.Duration) time.Duration {
	if setting == 0 {
		return DefaultWriteCoalesce
	}
	return max(0, setting)
}

// NATSOptions are the party's options for its NATS connection (the service
// runner asks for them).
func (c *Config) NATSOptions() []nats.Option {
	return []nats.Option{bus.CoalesceWrites(c.WriteCoalesce)}
}

// Options checks the configuration (Validate) and returns the party's
// options for it: DUET_PERSIST_DELAY=0 as Options.PersistDelay -1 (each
// write at once), and with DUET_PERSIST the state key derived from the
// party's identity id and the storage DUET_STATE_FILE_STORE names.
// DUET_WRITE_COALESCE goes to the connection instead (NATSOptions).
func (c *Config) Options(id *codec.Identity, log *slog.Logger, m *metrics.Set) (Options, error) {
	if err := c.Validate(); err != nil {
		return Options{}, err
	}
	opt := Options{ID: c.Party, Loops: c.Loops, Prefetch: c.Prefetch, ItemWait: c.ItemWait,
		StateReplicas: c.StateReplicas, PersistDelay: c.PersistDelay, PeerBatch: c.PeerBatch,
		TwoHop: c.TwoHop, Log: log, Metrics: m}
	if opt.PersistDelay == 0 {
		opt.PersistDelay = -1 // at once
	}
	if c.Persist {
		if err := opt.Persist(id, c.StateFileStore); err != nil {
			return Options{}, err
		}
	}
	return opt, nil
}

// Validate checks the values.
func (c *Config) Validate() error {
	if c.Party != 0 && c.Party != 1 {
		return fmt.Errorf("DUET_PARTY=%d: want 0 or 1", c.Party)
	}
	if len(c.Loops) == 0 {
		return fmt.Errorf("DUET_LOOPS is empty")
	}
	if err := checkLoops(c.Loops); err != nil {
		return fmt.Errorf("DUET_LOOPS: %w", err)
	}
	if c.Prefetch < 1 || c.Prefetch > MaxPrefetch {
		return fmt.Errorf("DUET_PREFETCH=%d: want 1..%d", c.Prefetch, MaxPrefetch)
	}
	if c.StateReplicas < 1 || c.StateReplicas > 5 {
		return fmt.Errorf("DUET_STATE_REPLICAS=%d: want 1..5", c.StateReplicas)
	}
	// Above 0, at least minPersistDelay: the deferred work that waits it
	// is tried again every delay while a loop's lock is held, and a delay
	// of a nanosecond spun a core for as long.
	if c.PersistDelay < 0 || c.PersistDelay > time.Second || (c.PersistDelay > 0 && c.PersistDelay < minPersistDelay) {
		return fmt.Errorf("DUET_PERSIST_DELAY=%v: want 0 or %v..1s", c.PersistDelay, minPersistDelay)
	}
	if c.PeerBatch < 1 || c.PeerBatch > codec.MaxBatchEnvelopes {
		return fmt.Errorf("DUET_PEER_BATCH=%d: want 1..%d", c.PeerBatch, codec.MaxBatchEnvelopes)
	}
	if c.WriteCoalesce < 0 || c.WriteCoalesce > MaxWriteCoalesce {
		return fmt.Errorf("DUET_WRITE_COALESCE=%v: want 0..%v", c.WriteCoalesce, MaxWriteCoalesce)
	}
	if c.ItemWait <= 0 || c.ItemWait > time.Second {
		return fmt.Errorf("DUET_ITEM_WAIT=%v: want > 0 and <= 1s (a tick waiting longer is past every deadline, and holds its loop)", c.ItemWait)
	}
	return nil
}
