package plant

import (
	"fmt"
	"math"
)

// Plant is a sampled plant. Measure returns y_t as measured (after sensor
// quantization, if the plant has any); Step applies the input computed for
// this tick and advances one sampling period. Input delay is handled inside:
// with input_delay d, the u passed to Step at tick t acts on the plant during
// the period starting at tick t+d (before that, zero input).
//
// Step panics if len(u) != Inputs() or u holds a NaN: both are programming
// errors of the control loop, not conditions to recover from.
type Plant interface {
	Outputs() int // p
	Inputs() int  // m
	Measure() []float64
	Step(u []float64)
}

// delayLine holds the last d inputs; push returns the one that acts now.
type delayLine struct {
	slots [][]float64 // slots[head] is the oldest pending input
	head  int
	out   []float64
}

func newDelayLine(d, m int) *delayLine {
	l := &delayLine{slots: make([][]float64, d), out: make([]float64, m)}
	for i := range l.slots {
		l.slots[i] = make([]float64, m) // zero input until the first one arrives
	}
	return l
}

// push stores u (copied) and returns the input for the coming period: u
// itself when d = 0, otherwise the input pushed d calls ago. The returned
// slice is reused by the next call.
func (l *delayLine) push(u []float64) []float64 {
	if len(l.slots) == 0 {
		copy(l.out, u)
		return l.out
	}
	copy(l.out, l.slots[l.head])
	copy(l.slots[l.head], u)
	l.head = (l.head + 1) % len(l.slots)
	return l.out
}

func checkInput(u []float64, m int) {
	if len(u) != m {
		panic(fmt.Sprintf("plant: Step got %d inputs, want %d", len(u), m))
	}
	for i, v := range u {
		if math.IsNaN(v) {
			panic(fmt.Sprintf("plant: Step input %d is NaN", i))
		}
	}
}

// LTI is the discrete-time plant x_{t+1} = A x_t + B u_t, y_t = C x_t of an
// "lti" Spec, with u_t the delayed input. It has no quantization, and its
// arithmetic is plain float64 in a fixed order, so two LTI plants fed the
// same inputs agree bit for bit.
type LTI struct {
	a, b, c [][]float64
	x, next []float64
	delay   *delayLine
}

func newLTI(s Spec) *LTI {
	n, m := len(s.A), len(s.B[0])
	l := &LTI{
		a:     cloneMatrix(s.A),
		b:     cloneMatrix(s.B),
		c:     cloneMatrix(s.C),
		x:     make([]float64, n),
		next:  make([]float64, n),
		delay: newDelayLine(s.InputDelay, m),
	}
	copy(l.x, s.X0)
	return l
}

func cloneMatrix(M [][]float64) [][]float64 {
	out := make([][]float64, len(M))
	for i, row := range M {
		out[i] = append([]float64(nil), row...)
	}
	return out
}

// Outputs is p, the rows of C.
func (l *LTI) Outputs() int { return len(l.c) }

// Inputs is m, the columns of B.
func (l *LTI) Inputs() int { return len(l.b[0]) }

// Measure returns y_t = C x_t in a fresh slice.
func (l *LTI) Measure() []float64 {
	y := make([]float64, len(l.c))
	for i, row := range l.c {
		y[i] = dot(row, l.x)
	}
	return y
}

// Step pushes u into the delay line and advances x by one tick with the
// input that comes out of it.
func (l *LTI) Step(u []float64) {
	checkInput(u, l.Inputs())
	v := l.delay.push(u)
	for i := range l.x {
		l.next[i] = dot(l.a[i], l.x) + dot(l.b[i], v)
	}
	l.x, l.next = l.next, l.x
}

// State returns a copy of x_t.
func (l *LTI) State() []float64 { return append([]float64(nil), l.x...) }

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
