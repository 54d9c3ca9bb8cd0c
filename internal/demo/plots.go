package demo

import (
	"errors"
	"fmt"
	"image/color"
	"io/fs"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// WritePlots writes alpha.png and input.png (α and u over time, like the
// paper's Fig. 4) and latency.png (tick latency distribution) into dir.
func WritePlots(dir string, recs []TickRecord, period float64, alphaIndex int) error {
	ps := plotSeries{period: period, alphaIndex: alphaIndex}
	for i := range recs {
		ps.add(&recs[i])
	}
	return ps.write(dir)
}

// plotSeries collects the plotted points one record at a time: 56 bytes a
// tick, where a record with its vectors takes several hundred.
type plotSeries struct {
	period       float64
	alphaIndex   int
	alpha, u, up plotter.XYs
	lat          []float64
	n            int // records added
}

func (ps *plotSeries) add(r *TickRecord) {
	ps.n++
	t := float64(r.Tick) * ps.period
	if ps.alphaIndex < len(r.Y) {
		ps.alpha = append(ps.alpha, plotter.XY{X: t, Y: r.Y[ps.alphaIndex]})
	}
	if r.Applied && len(r.U) > 0 {
		ps.u = append(ps.u, plotter.XY{X: t, Y: r.U[0]})
		if !r.Miss {
			ps.lat = append(ps.lat, float64(r.Latency.Microseconds()))
		}
	}
	if len(r.UPlain) > 0 {
		ps.up = append(ps.up, plotter.XY{X: t, Y: r.UPlain[0]})
	}
}

func (ps *plotSeries) write(dir string) error {
	if ps.n == 0 {
		return fmt.Errorf("demo: no ticks to plot")
	}
	if err := linePlot(filepath.Join(dir, "alpha.png"), "Pendulum angle (secure loop)", "time (s)", "y[1] (deg)",
		[]series{{"α (measured)", ps.alpha, color.RGBA{R: 31, G: 119, B: 180, A: 255}}}); err != nil {
		return err
	}
	if err := linePlot(filepath.Join(dir, "input.png"), "Control input", "time (s)", "u (V)",
		[]series{{"u secure", ps.u, color.RGBA{R: 214, G: 39, B: 40, A: 255}}, {"u plaintext", ps.up, color.RGBA{R: 44, G: 160, B: 44, A: 255}}}); err != nil {
		return err
	}
	if len(ps.lat) == 0 { // no tick in time: no latency.png, not an earlier run's
		if err := os.Remove(filepath.Join(dir, "latency.png")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	p := plot.New()
	p.Title.Text = "Tick latency (sensor publish to actuator reconstruction)"
	p.X.Label.Text = "latency (µs)"
	p.Y.Label.Text = "ticks"
	h, err := plotter.NewHist(plotter.Values(ps.lat), 40)
	if err != nil {
		return err
	}
	p.Add(h)
	return p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, "latency.png"))
}

type series struct {
	name string
	xy   plotter.XYs
	c    color.Color
}

func linePlot(path, title, x, y string, ss []series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	for _, s := range ss {
		if len(s.xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xy)
		if err != nil {
			return err
		}
		l.Color = s.c
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	p.Legend.Top = true
	return p.Save(8*vg.Inch, 3.5*vg.Inch, path)
}
