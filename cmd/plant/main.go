// Command plant serves a simulated plant (QUBE-Servo 2 or LTI) over NATS as a
// device driver would. Configuration: DUET_ environment variables (-h).
package main

import (
	"context"

	"github.com/duet-mpc/duet/internal/plantsvc"
	"github.com/duet-mpc/duet/internal/service"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/plant"
)

func main() {
	var cfg plantsvc.Config
	service.Main("plant", func() codec.Role { return codec.RolePlant }, &cfg, &cfg.Common, func(ctx context.Context, env *service.Env) error {
		spec, err := plant.LoadSpec(cfg.Plant)
		if err != nil {
			return err
		}
		pl, err := plant.New(spec)
		if err != nil {
			return err
		}
		s, err := plantsvc.New(env.NC, env.Sealer, plantsvc.Options{Loop: cfg.Loop, Plant: pl, Wait: cfg.Wait, Log: env.Log, Metrics: env.Metrics})
		if err != nil {
			return err
		}
		ready := func() bool { return true }
		env.Ready.Store(&ready)
		return s.Run(ctx)
	})
}
