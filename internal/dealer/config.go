package dealer

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/metrics"
)

// Config is the dealer service's environment. Dealers learn the loops to
// serve (dimensions, modulus, variant, session secret) from the sensor's
// sealed records in the set-up KV bucket, not from configuration.
type Config struct {
	config.Common
	Name     string        `envconfig:"NAME" default:"" desc:"replica name for logs (default: host name)"`
	LowWater int           `envconfig:"LOW_WATER" default:"750" desc:"refill a loop's queue when it holds fewer items, at least 1 (750 = 30 s of 40 ms ticks); keep it well below the sensor's DUET_QUEUE_MAX, or every refill finds the queue full"`
	Batch    int           `envconfig:"BATCH" default:"64" desc:"items published per refill round, 1..100000, rounded up to whole stream messages, and at most what the queue has room for (a replica refills a batch at a time, re-checking the depth in between)"`
	Poll     time.Duration `envconfig:"POLL" default:"50ms" desc:"shortest interval between a loop's queue depth checks (while the queue nears its low-water mark); more than 0"`
	PollMax  time.Duration `envconfig:"POLL_MAX" default:"1s" desc:"longest interval between a loop's queue depth checks (while its parties take no items); at least DUET_POLL, at most 1m"`
}

// Validate checks the values.
func (c *Config) Validate() error {
	if c.LowWater < 1 {
		return fmt.Errorf("DUET_LOW_WATER=%d: want >= 1", c.LowWater)
	}
	if c.Batch < 1 || c.Batch > 100000 {
		return fmt.Errorf("DUET_BATCH=%d: want 1..100000", c.Batch)
	}
	if c.Poll <= 0 {
		return fmt.Errorf("DUET_POLL=%v: want > 0", c.Poll)
	}
	if c.PollMax < c.Poll || c.PollMax > time.Minute {
		return fmt.Errorf("DUET_POLL_MAX=%v: want >= DUET_POLL (%v) and <= 1m (a loop whose parties resume after a quiet spell waits up to this long for its refill)", c.PollMax, c.Poll)
	}
	return nil
}

// Options checks the configuration (Validate) and returns the dealer's
// options for it: without DUET_NAME, the replica is named after its host.
func (c *Config) Options(log *slog.Logger, m *metrics.Set) (Options, error) {
	if err := c.Validate(); err != nil {
		return Options{}, err
	}
	name := c.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	return Options{Name: name, LowWater: c.LowWater, Batch: c.Batch, Poll: c.Poll, PollMax: c.PollMax, Log: log, Metrics: m}, nil
}
