package sensor

import (
	"fmt"
	"time"

	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// Config is the sensor service's environment.
type Config struct {
	config.Common
	Loop        string        `envconfig:"LOOP" default:"pendulum" desc:"loop id"`
	Controller  string        `envconfig:"CONTROLLER" default:"examples/qube-servo2/controller.json" desc:"controller spec file (JSON)"`
	Mask        string        `envconfig:"MASK" default:"per-tick" desc:"Protocol 1 variant: per-tick (the paper's) or fixed"`
	Compress    bool          `envconfig:"COMPRESS" default:"true" desc:"dealers seed-compress P0's material"`
	Period      time.Duration `envconfig:"PERIOD" default:"40ms" desc:"tick period"`
	QueueMax    int64         `envconfig:"QUEUE_MAX" default:"2000" desc:"offline queue capacity in items (backpressure for dealers)"`
	ItemsPerMsg int           `envconfig:"ITEMS_PER_MSG" default:"8" desc:"offline items per stream message (1..128; 1 while a party or dealer still runs a release without multi-item messages)"`
	FileStore   bool          `envconfig:"FILE_STORE" default:"false" desc:"JetStream file storage for the queue and set-up records"`
	TwoHop      bool          `envconfig:"TWO_HOP" default:"false" desc:"the two-hop tick: when both parties have sent their shares of the next item's measurement mask, send them ȳ minus the mask instead of shares of ȳ, so the tick needs no exchange after the measurement (docs/two-hop-design.md); set on the sensor and both parties"`
	Replicas    int           `envconfig:"REPLICAS" default:"1" desc:"JetStream replicas for the queue and set-up records"`
}

// Validate checks the values.
func (c *Config) Validate() error {
	if err := codec.ValidLoopID(c.Loop); err != nil {
		return fmt.Errorf("DUET_LOOP: %w", err)
	}
	if _, err := mpc.ParseVariant(c.Mask); err != nil {
		return fmt.Errorf("DUET_MASK: %w", err)
	}
	if c.Period < time.Millisecond || c.Period > time.Minute {
		return fmt.Errorf("DUET_PERIOD=%v: want 1ms..1m", c.Period)
	}
	if c.QueueMax < 16 {
		return fmt.Errorf("DUET_QUEUE_MAX=%d: want >= 16", c.QueueMax)
	}
	if c.ItemsPerMsg < 1 || c.ItemsPerMsg > codec.MaxItemsPerMsg {
		return fmt.Errorf("DUET_ITEMS_PER_MSG=%d: want 1..%d", c.ItemsPerMsg, codec.MaxItemsPerMsg)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("DUET_REPLICAS=%d: want 1..5", c.Replicas)
	}
	return nil
}
