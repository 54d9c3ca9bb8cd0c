// Command plant serves a simulated plant (QUBE-Servo 2 or LTI) over NATS as a
// device driver would. Configuration: DUET_ environment variables (-h).
package main

import (
	"context"

	"github.com/duet-mpc/duet/internal/plantsvc"
	"github.com/duet-mpc/duet/internal/service"
	"github.com/duet-mpc/duet/pkg/codec"
)

func main() {
	var cfg plantsvc.Config
	service.Main("plant", func() codec.Role { return codec.RolePlant }, &cfg, &cfg.Common, func(ctx context.Context, env *service.Env) error {
		opt, err := cfg.Options(env.Log, env.Metrics)
		if err != nil {
			return err
		}
		s, err := plantsvc.New(env.NC, env.Sealer, opt)
		if err != nil {
			return err
		}
		ready := s.Ready
		env.Ready.Store(&ready)
		return s.Run(ctx)
	})
}
