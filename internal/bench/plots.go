package bench

import (
	"image/color"
	"math"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var seriesColors = []color.RGBA{
	{R: 214, G: 39, B: 40, A: 255},  // protocol1/per-tick
	{R: 31, G: 119, B: 180, A: 255}, // protocol1/fixed
	{R: 44, G: 160, B: 44, A: 255},  // protocol2
}

// WriteFig5Plot writes fig5.png: the mean round trip with its 99% confidence
// band against d, one line per series, and each series' floor dashed. The y
// axis is logarithmic: the per-tick series grows with d^2 bytes, Protocol 2
// stays flat.
func (rep *Report) WriteFig5Plot(dir string) error {
	p := plot.New()
	p.Title.Text = "Round trip at the client (Fig. 5), mean with 99% CI; dashed: floor"
	p.X.Label.Text = "d"
	p.Y.Label.Text = "round trip (µs)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = ticks125{}
	p.Add(plotter.NewGrid())
	for i, s := range Fig5Series {
		var mean, floor, band plotter.XYs
		var lo plotter.XYs
		for _, r := range rep.Fig5 {
			if r.Series != s {
				continue
			}
			x := float64(r.D)
			mean = append(mean, plotter.XY{X: x, Y: us(r.Lat.Mean)})
			floor = append(floor, plotter.XY{X: x, Y: us(r.Floor.Mean)})
			band = append(band, plotter.XY{X: x, Y: us(r.Lat.CIHi)})
			lo = append(lo, plotter.XY{X: x, Y: max(us(r.Lat.CILo), 1)})
		}
		if len(mean) == 0 {
			continue
		}
		c := seriesColors[i%len(seriesColors)]
		for j := len(lo) - 1; j >= 0; j-- {
			band = append(band, lo[j])
		}
		if len(mean) > 1 {
			poly, err := plotter.NewPolygon(band)
			if err != nil {
				return err
			}
			poly.Color = color.NRGBA{R: c.R, G: c.G, B: c.B, A: 50}
			poly.LineStyle.Width = 0
			p.Add(poly)
		}
		l, pts, err := plotter.NewLinePoints(mean)
		if err != nil {
			return err
		}
		l.Color, pts.Color = c, c
		p.Add(l, pts)
		p.Legend.Add(s.Name(), l, pts)
		fl, err := plotter.NewLine(floor)
		if err != nil {
			return err
		}
		fl.Color = c
		fl.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(fl)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, "fig5.png"))
}

// WriteScalePlot writes scale.png: p50 and p99 tick latency against the
// number of concurrent loops with the state persisted (the main search) and
// p99 without persistence, with the 10 ms limit, the floor's p99 at the
// persisted steps' loops, and the p99 of the floor alone (no parties) at
// larger loop counts. Every step is a point, so a search that stopped after
// its first step still shows it.
func (rep *Report) WriteScalePlot(dir string, limitUS float64) error {
	p := plot.New()
	p.Title.Text = "Concurrent 25 Hz loops on one P0/P1 pair"
	p.X.Label.Text = "loops"
	p.Y.Label.Text = "tick latency (µs)"
	p.Add(plotter.NewGrid())
	var p50, p99, p99np, lim, fp99, alone plotter.XYs
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rep.Scale {
		if r.Persist {
			fp99 = append(fp99, plotter.XY{X: float64(r.Loops), Y: us(r.FloorP99)})
			p50 = append(p50, plotter.XY{X: float64(r.Loops), Y: us(r.P50)})
			p99 = append(p99, plotter.XY{X: float64(r.Loops), Y: us(r.P99)})
		} else {
			p99np = append(p99np, plotter.XY{X: float64(r.Loops), Y: us(r.P99)})
		}
		lo, hi = math.Min(lo, float64(r.Loops)), math.Max(hi, float64(r.Loops))
	}
	for _, r := range rep.ScaleFloor {
		alone = append(alone, plotter.XY{X: float64(r.Loops), Y: us(r.P99)})
		lo, hi = math.Min(lo, float64(r.Loops)), math.Max(hi, float64(r.Loops))
	}
	if lo <= hi {
		lim = plotter.XYs{{X: lo, Y: limitUS}, {X: hi, Y: limitUS}}
	}
	for i, s := range []struct {
		name string
		xy   plotter.XYs
	}{{"p50", p50}, {"p99", p99}, {"p99 limit", lim}, {"floor p99", fp99}, {"floor alone p99", alone}, {"p99, not persisted", p99np}} {
		if len(s.xy) == 0 {
			continue
		}
		// Lines with points: a search that stopped after one step still shows it.
		l, pts, err := plotter.NewLinePoints(s.xy)
		if err != nil {
			return err
		}
		l.Color, pts.Color = scaleColors[i], scaleColors[i]
		if i >= 2 && i <= 4 {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		if i == 2 {
			pts.Radius = 0
		}
		p.Add(l, pts)
		p.Legend.Add(s.name, l, pts)
	}
	// Bottom right: the lines rise to the right and start at the left.
	p.Legend.Top = false
	p.Legend.Left = false
	return p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, "scale.png"))
}

// scaleColors: p50, p99, the limit, the floor at the same loops, the floor
// alone, p99 without persistence.
var scaleColors = []color.RGBA{
	seriesColors[0], seriesColors[1], seriesColors[2],
	{R: 214, G: 39, B: 40, A: 255},
	{R: 127, G: 127, B: 127, A: 255},
	{R: 148, G: 103, B: 189, A: 255},
}

// ticks125 marks 1, 2 and 5 times the powers of ten on a log axis.
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	if lo <= 0 || hi <= lo {
		return ts
	}
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
			}
		}
	}
	return ts
}
