package plant

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

func mustNew(t *testing.T, s Spec) Plant {
	t.Helper()
	p, err := New(s)
	if err != nil {
		t.Fatalf("New(%+v): %v", s, err)
	}
	return p
}

// A scalar integrator x_{t+1} = x_t + u_t makes the delay visible exactly:
// with delay d, a unit input at tick 0 acts during period d, so y is 0 up to
// tick d and 1 from tick d+1 on.
func TestLTIInputDelayExact(t *testing.T) {
	for _, d := range []int{0, 1, 2, 5} {
		p := mustNew(t, Spec{Kind: KindLTI, A: [][]float64{{1}}, B: [][]float64{{1}}, C: [][]float64{{1}}, InputDelay: d})
		for tick := range d + 4 {
			want := 0.0
			if tick > d {
				want = 1
			}
			if got := p.Measure()[0]; got != want {
				t.Errorf("delay %d, tick %d: got y = %v, want %v", d, tick, got, want)
			}
			u := 0.0
			if tick == 0 {
				u = 1
			}
			p.Step([]float64{u})
		}
	}
}

// A plant with delay d fed u_0, u_1, ... is the undelayed plant fed d zero
// inputs first, bit for bit, for both kinds and several inputs.
func TestInputDelayIsShift(t *testing.T) {
	lti := Spec{
		Kind: KindLTI,
		A:    [][]float64{{0.9, 0.2, 0}, {-0.1, 0.8, 0.3}, {0, 0, 0.5}},
		B:    [][]float64{{1, 0}, {0, 1}, {0.5, -0.5}},
		C:    [][]float64{{1, 0, 0}, {0, 1, 1}},
		X0:   []float64{1, -1, 0.5},
	}
	qube := Spec{Kind: KindQube, Alpha0Deg: 2, Theta0Deg: 10, PeriodMillis: 40}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, base := range []Spec{lti, qube} {
		for _, d := range []int{1, 2, 3} {
			delayed := base
			delayed.InputDelay = d
			pd, p0 := mustNew(t, delayed), mustNew(t, base)
			m := p0.Inputs()
			queue := make([][]float64, d) // the inputs p0 gets: d zeros, then u_0, u_1, ...
			for i := range queue {
				queue[i] = make([]float64, m)
			}
			for tick := range 30 {
				u := make([]float64, m)
				for i := range u {
					u[i] = 4 * (rng.Float64() - 0.5)
				}
				queue = append(queue, u)
				pd.Step(u)
				p0.Step(queue[tick])
				if got, want := pd.Measure(), p0.Measure(); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s delay %d tick %d: got y = %v, want %v", base.Kind, d, tick, got, want)
				}
			}
		}
	}
}

// Step must copy u: the caller may reuse its slice while the input waits in
// the delay line.
func TestStepCopiesInput(t *testing.T) {
	p := mustNew(t, Spec{Kind: KindLTI, A: [][]float64{{1}}, B: [][]float64{{1}}, C: [][]float64{{1}}, InputDelay: 1})
	u := []float64{1}
	p.Step(u)
	u[0] = 100
	p.Step([]float64{0})
	if got, want := p.Measure()[0], 1.0; got != want {
		t.Errorf("got y = %v, want %v", got, want)
	}
}

func TestLTIDynamics(t *testing.T) {
	// Double integrator from x0 = [1, 2]: y_t = 1 + 2t + sum of past inputs' effect.
	p := mustNew(t, Spec{Kind: KindLTI, A: [][]float64{{1, 1}, {0, 1}}, B: [][]float64{{0}, {1}}, C: [][]float64{{1, 0}, {0, 1}}, X0: []float64{1, 2}})
	for tick := range 5 {
		got := p.Measure()
		want := []float64{1 + 2*float64(tick) + float64(tick*(tick-1)/2), 2 + float64(tick)}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("tick %d: got y = %v, want %v", tick, got, want)
		}
		p.Step([]float64{1})
	}
	if got, want := p.(*LTI).State(), []float64{21, 7}; !reflect.DeepEqual(got, want) {
		t.Errorf("State: got %v, want %v", got, want)
	}
}

func TestStepPanicsOnBadInput(t *testing.T) {
	for _, u := range [][]float64{nil, {1, 2}} {
		p := mustNew(t, Spec{Kind: KindQube, PeriodMillis: 40})
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Step(%v): got no panic, want one", u)
				}
			}()
			p.Step(u)
		}()
	}
}

// ExampleNew runs a one-tick-delayed integrator.
func ExampleNew() {
	s, err := ParseSpec([]byte(`{"kind":"lti","A":[[1]],"B":[[1]],"C":[[1]],"input_delay":1}`))
	if err != nil {
		panic(err)
	}
	p, err := New(s)
	if err != nil {
		panic(err)
	}
	for range 4 {
		y := p.Measure()
		fmt.Print(y[0], " ")
		p.Step([]float64{1})
	}
	fmt.Println()
	// Output: 0 0 1 2
}
