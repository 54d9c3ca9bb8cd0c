// Command actuator reconstructs u_t from the parties' output shares and
// applies it to the plant. Configuration: DUET_ environment variables (-h).
package main

import (
	"context"

	"github.com/duet-mpc/duet/internal/actuator"
	"github.com/duet-mpc/duet/internal/service"
	"github.com/duet-mpc/duet/pkg/codec"
)

func main() {
	var cfg actuator.Config
	service.Main("actuator", func() codec.Role { return codec.RoleActuator }, &cfg, &cfg.Common, func(ctx context.Context, env *service.Env) error {
		opt, err := cfg.Options(env.Log, env.Metrics)
		if err != nil {
			return err
		}
		a, err := actuator.New(env.NC, env.Sealer, opt)
		if err != nil {
			return err
		}
		ready := a.Ready
		env.Ready.Store(&ready)
		return a.Run(ctx)
	})
}
