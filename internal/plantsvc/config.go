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
	Loop  string        `envconfig:"LOOP" default:"pendulum" desc:"loop id"`
	Plant string        `envconfig:"PLANT" default:"examples/qube-servo2/plant.json" desc:"plant spec file (JSON)"`
	Wait  time.Duration `envconfig:"WAIT" default:"60ms" desc:"how long a read waits for the previous tick's input before holding the last one (a read that comes meanwhile takes over and keeps that deadline; the earlier one goes unanswered); more than 0, at most 1m"`
}

// Validate checks the values.
func (c *Config) Validate() error {
	if err := codec.ValidLoopID(c.Loop); err != nil {
		return fmt.Errorf("DUET_LOOP: %w", err)
	}
	if c.Wait <= 0 || c.Wait > time.Minute {
		return fmt.Errorf("DUET_WAIT=%v: want > 0 and <= 1m", c.Wait)
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
	return Options{Loop: c.Loop, Plant: pl, Wait: c.Wait, Log: log, Metrics: m}, nil
}
