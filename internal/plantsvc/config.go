package plantsvc

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/plant"
)

// Config is the plant service's environment.
type Config struct {
	config.Common
	Loop      string        `envconfig:"LOOP" default:"pendulum" desc:"loop id"`
	Plant     string        `envconfig:"PLANT" default:"examples/qube-servo2/plant.json" desc:"plant spec file (JSON)"`
	Wait      time.Duration `envconfig:"WAIT" default:"60ms" desc:"how long a read waits for the previous tick's input before holding the last one (a read that comes meanwhile takes over and keeps that deadline; the earlier one goes unanswered); more than 0, at most 1m"`
	HoldReads int           `envconfig:"HOLD_READS" default:"25" desc:"after this many advances in a row with no input (each holds the last input within DUET_WAIT and is counted in duet_deadline_misses_total: the actuator crashed, or is cut off from the plant, so that no fail-safe of its own comes), the plant advances with zero input instead, as a device's own watchdog would, until an input comes; 0 holds the last input for ever; 0..100000"`
}

// Validate checks the values.
func (c *Config) Validate() error {
	if err := codec.ValidLoopID(c.Loop); err != nil {
		return fmt.Errorf("DUET_LOOP: %w", err)
	}
	if c.Wait <= 0 || c.Wait > time.Minute {
		return fmt.Errorf("DUET_WAIT=%v: want > 0 and <= 1m", c.Wait)
	}
	if c.HoldReads < 0 || c.HoldReads > 100000 {
		return fmt.Errorf("DUET_HOLD_READS=%d: want 0..100000", c.HoldReads)
	}
	return nil
}

// Options checks the configuration (Validate) and returns the plant
// service's options for it: the plant simulated from DUET_PLANT's spec.
func (c *Config) Options(log *slog.Logger, m *metrics.Set) (Options, error) {
	if err := c.Validate(); err != nil {
		return Options{}, err
	}
	spec, err := plant.LoadSpec(c.Plant)
	if err != nil {
		return Options{}, err
	}
	pl, err := plant.New(spec)
	if err != nil {
		return Options{}, err
	}
	return Options{Loop: c.Loop, Plant: pl, Wait: c.Wait, HoldReads: c.HoldReads, Log: log, Metrics: m}, nil
}
