package sensor

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/metrics"
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
	Period      time.Duration `envconfig:"PERIOD" default:"40ms" desc:"tick period (1ms..1m); it must equal the sample time the controller was designed for and the plant's period (period_ms in the plant service's DUET_PLANT spec)"`
	QueueMax    int64         `envconfig:"QUEUE_MAX" default:"2000" desc:"offline queue capacity in items, at least 16 (backpressure for dealers); keep it well above the dealers' DUET_LOW_WATER, or every refill finds the queue full"`
	ItemsPerMsg int           `envconfig:"ITEMS_PER_MSG" default:"8" desc:"offline items per stream message (1..128; 1 while a party or dealer still runs a release without multi-item messages). A set-up the sensor resumes keeps the value it was made with, and says so at warning level: a new value takes effect with the next new set-up"`
	FileStore   bool          `envconfig:"FILE_STORE" default:"false" desc:"JetStream file storage for the queue and set-up records (the set-up records' bucket, duet-setup, is shared by the sensors of every loop: set it alike on all; a sensor with the other value is refused by the server, which cannot change it in place, and stops, naming it)"`
	TwoHop      bool          `envconfig:"TWO_HOP" default:"false" desc:"the two-hop tick: when both parties have sent their shares of the next item's measurement mask, send them ȳ minus the mask instead of shares of ȳ, so the tick needs no exchange after the measurement (docs/two-hop-design.md); set on the sensor and both parties"`
	Replicas    int           `envconfig:"REPLICAS" default:"1" desc:"JetStream replicas for the queue and set-up records, 1..5 and at most the NATS servers in the cluster (the set-up records' bucket is shared by the sensors of every loop: set it alike on all; a sensor started with another value changes the bucket's replicas to its own, with a warning naming both)"`
	NoticeDelay string        `envconfig:"NOTICE_DELAY" default:"auto" desc:"how long after a tick's measurements the actuator is sent its notice of the tick, which dates a tick whose output shares never come (auto: 5ms, or a quarter of DUET_PERIOD if shorter; 0: with the measurements, inside the tick's latency); at most half of DUET_PERIOD (the sensor waits it before its next tick's plant read), and keep it under the actuator's DUET_DEADLINE"`
	Generation  uint64        `envconfig:"SETUP_GENERATION" default:"0" desc:"the set-up generation: the sensor resumes the loop's stored set-up only if it was made with the same value, so changing it (adding 1, say) makes the sensor start a new set-up at its next start, the controller from its initial state; then restart the loop's parties and actuator. Any change does, back to an earlier value too, so keep the new value. The remedy when the parties' states are more than one update apart"`
	PlantWait   time.Duration `envconfig:"PLANT_WAIT" default:"1s" desc:"how long a read of the plant (the plant service's reply to the sensor's request) may take before its tick is counted a miss; no tick is sent while a read waits, so above DUET_PERIOD a plant that hangs costs every period the wait spans, one of them counted; keep it above the plant service's DUET_WAIT (60ms), which a read may wait for the last input; 1ms..1m"`
}

// noticeAuto is DUET_NOTICE_DELAY's default: Options.NoticeDelay 0.
const noticeAuto = "auto"

// noticeDelay is DUET_NOTICE_DELAY as Options.NoticeDelay (0: the default;
// negative: at once).
func (c *Config) noticeDelay() (time.Duration, error) {
	if c.NoticeDelay == noticeAuto {
		return 0, nil
	}
	d, err := time.ParseDuration(c.NoticeDelay)
	if err != nil {
		return 0, fmt.Errorf("DUET_NOTICE_DELAY=%q: want auto or a duration such as 5ms", c.NoticeDelay)
	}
	// The sensor waits the delay in its tick loop: with the plant's read it
	// must fit in the period, or the loop's ticker drops periods, no tick
	// sent and none counted missed (a delay just under the period halved
	// the rate). Half the period leaves the read the other half; a read
	// slower than that drops periods too (DUET_PLANT_WAIT). Options set
	// directly (the demo, the bench) are not checked.
	if d < 0 || d > c.Period/2 {
		return 0, fmt.Errorf("DUET_NOTICE_DELAY=%v: want 0 to half of DUET_PERIOD (%v): the sensor waits it before its next tick's plant read", d, c.Period)
	}
	if d == 0 {
		return -1, nil
	}
	return d, nil
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
	if _, err := c.noticeDelay(); err != nil {
		return err
	}
	if c.PlantWait < time.Millisecond || c.PlantWait > time.Minute {
		return fmt.Errorf("DUET_PLANT_WAIT=%v: want 1ms..1m", c.PlantWait)
	}
	return nil
}

// Options checks the configuration (Validate) and returns the sensor's
// options for it: the controller read from DUET_CONTROLLER and the state key
// derived from the sensor's identity id.
func (c *Config) Options(id *codec.Identity, log *slog.Logger, m *metrics.Set) (Options, error) {
	if err := c.Validate(); err != nil {
		return Options{}, err
	}
	cs, err := mpc.LoadControllerSpec(c.Controller)
	if err != nil {
		return Options{}, err
	}
	v, _ := mpc.ParseVariant(c.Mask) // checked by Validate
	notice, _ := c.noticeDelay()     // checked by Validate
	key, err := StateKey(id)
	if err != nil {
		return Options{}, err
	}
	// Sizing and rounding errors (a value outside Q<k,l>, too small a
	// modulus, an unstable A) come from New, naming the file too.
	return Options{Loop: c.Loop, Controller: cs, ControllerFrom: "DUET_CONTROLLER " + c.Controller, Variant: v, Compress: c.Compress, Period: c.Period,
		QueueMax: c.QueueMax, ItemsPerMsg: c.ItemsPerMsg, FileStore: c.FileStore, Replicas: c.Replicas,
		TwoHop: c.TwoHop, NoticeDelay: notice, PlantWait: c.PlantWait, StateKey: &key, Generation: c.Generation,
		Log: log, Metrics: m}, nil
}
