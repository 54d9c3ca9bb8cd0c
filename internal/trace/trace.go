// Package trace writes the closed-loop trace CSV shared by `duet sim` and
// `duet demo`: step,y0..y{p-1},u0..u{m-1},uplain0..uplain{m-1}.
package trace

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
)

// Writer writes trace rows.
type Writer struct {
	w    *bufio.Writer
	p, m int
	buf  []byte
}

// NewWriter writes the header for p outputs and m inputs.
func NewWriter(w io.Writer, p, m int) (*Writer, error) {
	tw := &Writer{w: bufio.NewWriter(w), p: p, m: m}
	tw.buf = append(tw.buf, "step"...)
	for _, col := range []struct {
		name string
		n    int
	}{{"y", p}, {"u", m}, {"uplain", m}} {
		for i := 0; i < col.n; i++ {
			tw.buf = append(tw.buf, ',')
			tw.buf = append(tw.buf, col.name...)
			tw.buf = strconv.AppendInt(tw.buf, int64(i), 10)
		}
	}
	tw.buf = append(tw.buf, '\n')
	_, err := tw.w.Write(tw.buf)
	return tw, err
}

// Row writes one tick: y as measured, u as computed by the secure controller,
// uplain by the float64 controller on the same y.
func (t *Writer) Row(step int, y, u, uplain []float64) error {
	if len(y) != t.p || len(u) != t.m || len(uplain) != t.m {
		return fmt.Errorf("trace: row has %d/%d/%d values, want %d/%d/%d", len(y), len(u), len(uplain), t.p, t.m, t.m)
	}
	b := strconv.AppendInt(t.buf[:0], int64(step), 10)
	for _, vs := range [][]float64{y, u, uplain} {
		for _, v := range vs {
			b = append(b, ',')
			b = strconv.AppendFloat(b, v, 'g', -1, 64)
		}
	}
	b = append(b, '\n')
	t.buf = b
	_, err := t.w.Write(b)
	return err
}

// Flush flushes buffered rows.
func (t *Writer) Flush() error { return t.w.Flush() }
