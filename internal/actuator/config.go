package actuator

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
)

// Config is the actuator service's environment.
type Config struct {
	config.Common
	Loop     string        `envconfig:"LOOP" default:"pendulum" desc:"loop id"`
	Deadline time.Duration `envconfig:"DEADLINE" default:"30ms" desc:"time after the sensor's publish by which both output shares must arrive (more than 0, at most 1m)"`
	FailSafe string        `envconfig:"FAILSAFE" default:"zero" desc:"input applied on a missed deadline: zero or hold (repeat the last input)"`
	Watchdog time.Duration `envconfig:"WATCHDOG" default:"1s" desc:"with nothing applied for this long after an input (nothing reaches the actuator: the sensor, the broker or the network down), apply the fail-safe once, until the next input; 0 turns it off; longer than DUET_DEADLINE, at most 1h; it waits at least two of the sensor's periods (from its notices) and DUET_DEADLINE"`
}

// Validate checks the values.
func (c *Config) Validate() error {
	if err := codec.ValidLoopID(c.Loop); err != nil {
		return fmt.Errorf("DUET_LOOP: %w", err)
	}
	if c.Deadline <= 0 || c.Deadline > time.Minute {
		return fmt.Errorf("DUET_DEADLINE=%v: want > 0 and <= 1m", c.Deadline)
	}
	if c.Watchdog < 0 || c.Watchdog != 0 && (c.Watchdog <= c.Deadline || c.Watchdog > time.Hour) {
		return fmt.Errorf("DUET_WATCHDOG=%v: want 0 (off), or longer than DUET_DEADLINE (%v) and <= 1h", c.Watchdog, c.Deadline)
	}
	if _, err := ParseFailSafe(c.FailSafe); err != nil {
		return fmt.Errorf("DUET_FAILSAFE: %w", err)
	}
	return nil
}

// Options checks the configuration (Validate) and returns the actuator's
// options for it.
func (c *Config) Options(log *slog.Logger, m *metrics.Set) (Options, error) {
	if err := c.Validate(); err != nil {
		return Options{}, err
	}
	fs, _ := ParseFailSafe(c.FailSafe) // checked by Validate
	return Options{Loop: c.Loop, Deadline: c.Deadline, FailSafe: fs, Watchdog: c.Watchdog, Log: log, Metrics: m}, nil
}
