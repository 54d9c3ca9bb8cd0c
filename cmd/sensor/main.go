// Command sensor performs a loop's set-up and then samples the plant every
// tick, secret-sharing y_t to the parties. Configuration: DUET_ environment
// variables (-h lists them).
package main

import (
	"context"
	"sync/atomic"

	"github.com/duet-mpc/duet/internal/sensor"
	"github.com/duet-mpc/duet/internal/service"
	"github.com/duet-mpc/duet/pkg/codec"
)

func main() {
	var cfg sensor.Config
	service.Main("sensor", func() codec.Role { return codec.RoleSensor }, &cfg, &cfg.Common, func(ctx context.Context, env *service.Env) error {
		opt, err := cfg.Options(env.Identity, env.Log, env.Metrics)
		if err != nil {
			return err
		}
		s, err := sensor.New(env.NC, env.Sealer, opt)
		if err != nil {
			return err
		}
		var set atomic.Bool
		ready := set.Load
		env.Ready.Store(&ready)
		if err := s.Setup(ctx); err != nil {
			return err
		}
		set.Store(true)
		return s.Run(ctx)
	})
}
