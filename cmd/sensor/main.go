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
	"github.com/duet-mpc/duet/pkg/mpc"
)

func main() {
	var cfg sensor.Config
	service.Main("sensor", func() codec.Role { return codec.RoleSensor }, &cfg, &cfg.Common, func(ctx context.Context, env *service.Env) error {
		cs, err := mpc.LoadControllerSpec(cfg.Controller)
		if err != nil {
			return err
		}
		v, _ := mpc.ParseVariant(cfg.Mask)
		key, err := sensor.StateKey(env.Identity)
		if err != nil {
			return err
		}
		s, err := sensor.New(env.NC, env.Sealer, sensor.Options{Loop: cfg.Loop, Controller: cs, Variant: v, Compress: cfg.Compress,
			Period: cfg.Period, QueueMax: cfg.QueueMax, ItemsPerMsg: cfg.ItemsPerMsg, FileStore: cfg.FileStore, Replicas: cfg.Replicas, Log: env.Log, Metrics: env.Metrics, TwoHop: cfg.TwoHop,
			NoticeDelay: cfg.NoticeDelayOption(), PlantWait: cfg.PlantWait,
			StateKey: &key})
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
