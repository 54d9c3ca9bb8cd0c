package actuator

import (
	"fmt"
	"time"

	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/pkg/codec"
)

// Config is the actuator service's environment.
type Config struct {
	config.Common
	Loop     string        `envconfig:"LOOP" default:"pendulum" desc:"loop id"`
	Deadline time.Duration `envconfig:"DEADLINE" default:"30ms" desc:"time after the sensor's publish by which both output shares must arrive"`
	FailSafe string        `envconfig:"FAILSAFE" default:"zero" desc:"input applied on a missed deadline: zero or hold (repeat the last input)"`
}

// Validate checks the values.
func (c *Config) Validate() error {
	if err := codec.ValidLoopID(c.Loop); err != nil {
		return fmt.Errorf("DUET_LOOP: %w", err)
	}
	if c.Deadline <= 0 || c.Deadline > time.Minute {
		return fmt.Errorf("DUET_DEADLINE=%v: want > 0 and <= 1m", c.Deadline)
	}
	if _, err := ParseFailSafe(c.FailSafe); err != nil {
		return fmt.Errorf("DUET_FAILSAFE: %w", err)
	}
	return nil
}
