package plantsvc

import (
	"fmt"
	"time"

	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/pkg/codec"
)

// Config is the plant service's environment.
type Config struct {
	config.Common
	Loop  string        `envconfig:"LOOP" default:"pendulum" desc:"loop id"`
	Plant string        `envconfig:"PLANT" default:"examples/qube-servo2/plant.json" desc:"plant spec file (JSON)"`
	Wait  time.Duration `envconfig:"WAIT" default:"60ms" desc:"how long a read waits for the previous tick's input before holding the last one (a read that comes meanwhile takes over and keeps that deadline; the earlier one goes unanswered)"`
}

// Validate checks the values.
func (c *Config) Validate() error {
	if err := codec.ValidLoopID(c.Loop); err != nil {
		return fmt.Errorf("DUET_LOOP: %w", err)
	}
	if c.Wait <= 0 {
		return fmt.Errorf("DUET_WAIT=%v: want > 0", c.Wait)
	}
	return nil
}
