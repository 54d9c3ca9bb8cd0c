package plant

import (
	"math"
	"testing"
)

func relClose(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Abs(want)
}

// The numeric linearization must reproduce protocol.md §8.
func TestQubeLinearizationMatchesProtocol(t *testing.T) {
	A, B := QubeLinearization()
	wantA := [4][4]float64{
		{0, 0, 1, 0},
		{0, 0, 0, 1},
		{0, 149.275, -17.007, -4.915},
		{0, 261.609, -16.809, -8.614},
	}
	wantB := [4]float64{0, 0, 49.728, 49.149}
	const rel = 1e-3
	for i := range 4 {
		for j := range 4 {
			got, want := A[i][j], wantA[i][j]
			if want == 0 {
				if math.Abs(got) > 1e-9 {
					t.Errorf("A[%d][%d]: got %v, want 0", i, j, got)
				}
			} else if !relClose(got, want, rel) {
				t.Errorf("A[%d][%d]: got %v, want %v", i, j, got, want)
			}
		}
		got, want := B[i], wantB[i]
		if want == 0 {
			if math.Abs(got) > 1e-9 {
				t.Errorf("B[%d]: got %v, want 0", i, got)
			}
		} else if !relClose(got, want, rel) {
			t.Errorf("B[%d]: got %v, want %v", i, got, want)
		}
	}
}

func qubeSpec(alpha0Deg float64) Spec {
	return Spec{Kind: KindQube, Alpha0Deg: alpha0Deg, PeriodMillis: 40}
}

// runQube drives a Qube with RK4 steps of 1/stepsPerMs ms from α0 = 1° under
// a voltage that swings through the saturation, for 1 s.
func runQube(stepsPerMs int) [4]float64 {
	q := newQube(qubeSpec(1), stepsPerMs)
	for tick := range 25 {
		q.Step([]float64{12 * math.Sin(0.5*float64(tick))})
	}
	return q.State()
}

func maxAbsDiff(a, b [4]float64) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

// RK4 in 1 ms steps agrees with 0.25 ms steps over 1 s, and the error
// shrinks like h⁴, which also checks that rk4 is the fourth-order method.
func TestQubeRK4Converges(t *testing.T) {
	x1, x2, x4 := runQube(1), runQube(2), runQube(4)
	if d := maxAbsDiff(x1, x4); d > 1e-6 {
		t.Errorf("1 ms vs 0.25 ms: got max state difference %g, want <= 1e-6 (x1 = %v, x4 = %v)", d, x1, x4)
	}
	// err(h) ≈ c h⁴, so err(1 ms)/err(0.5 ms) ≈ 16; both measured against 0.25 ms.
	e1, e2 := maxAbsDiff(x1, x4), maxAbsDiff(x2, x4)*16/15
	ratio := e1 / e2
	t.Logf("max error vs 0.25 ms: %.3g at 1 ms, %.3g at 0.5 ms, ratio %.2f", e1, e2, ratio)
	if ratio < 12 || ratio > 20 {
		t.Errorf("error ratio for halving h: got %.2f (errors %g, %g), want about 16", ratio, e1, e2)
	}
}

// With zero input the upright equilibrium is unstable: from 3° the
// pendulum passes 30° within 2 s.
func TestQubeUprightUnstable(t *testing.T) {
	q := mustNew(t, qubeSpec(3)).(*Qube)
	for tick := range 50 {
		q.Step([]float64{0})
		if alpha := q.State()[1] * 180 / math.Pi; math.Abs(alpha) > 30 {
			t.Logf("|α| = %.1f° > 30° after %d ms", alpha, (tick+1)*40)
			return
		}
	}
	t.Errorf("after 2 s: got α = %.2f°, want |α| > 30°", q.State()[1]*180/math.Pi)
}

// qubeEnergy is the mechanical energy whose Euler-Lagrange equations are the
// model's: kinetic ½ ξ'ᵀ M(α) ξ' plus potential ½ mp g Lp cos α.
func qubeEnergy(x [4]float64) float64 {
	s, c := math.Sincos(x[1])
	m11 := QubeJr + QubeMp*QubeLr*QubeLr + 0.25*QubeMp*QubeLp*QubeLp*s*s
	m12 := -0.5 * QubeMp * QubeLp * QubeLr * c
	m22 := QubeJp + 0.25*QubeMp*QubeLp*QubeLp
	kin := 0.5*m11*x[2]*x[2] + m12*x[2]*x[3] + 0.5*m22*x[3]*x[3]
	return kin + 0.5*QubeMp*QubeG*QubeLp*c
}

// qubeDissipation is the power lost with zero voltage: viscous damping plus
// the back-EMF's km²/Rm θ'².
func qubeDissipation(x [4]float64) float64 {
	return (QubeDr+QubeKm*QubeKm/QubeRm)*x[2]*x[2] + QubeDp*x[3]*x[3]
}

// With zero voltage, energy never rises and its loss equals the integrated
// dissipation. This checks the nonlinear (Coriolis, centrifugal, gravity)
// terms, which the linearization test cannot see.
func TestQubeEnergyBalance(t *testing.T) {
	q := mustNew(t, Spec{Kind: KindQube, Alpha0Deg: 3, PeriodMillis: 1}).(*Qube)
	q.x[2] = 8 // spin the arm too, so the θ'α' and θ'² terms act
	e0 := qubeEnergy(q.x)
	prev, lost := e0, 0.0
	for ms := range 3000 {
		before := q.x
		q.Step([]float64{0})
		// Trapezoid rule over each 1 ms step: O(h²), far inside the tolerance.
		lost += 0.001 * (qubeDissipation(before) + qubeDissipation(q.x)) / 2
		e := qubeEnergy(q.x)
		if e > prev+1e-12 {
			t.Fatalf("ms %d: energy rose from %v to %v J with zero input", ms, prev, e)
		}
		prev = e
	}
	t.Logf("energy %.6g J -> %.6g J, dissipated %.6g J, mismatch %.2g relative", e0, prev, lost, (e0-prev-lost)/lost)
	if got, want := e0-prev, lost; !relClose(got, want, 1e-4) {
		t.Errorf("energy lost over 3 s: got %v J, want the dissipated %v J", got, want)
	}
	if math.Abs(q.State()[1]) < 1 {
		t.Errorf("pendulum did not swing down: α = %v rad", q.State()[1])
	}
}

// Measurements are whole encoder counts within half a count of the truth.
func TestQubeMeasureQuantized(t *testing.T) {
	q := mustNew(t, Spec{Kind: KindQube, Alpha0Deg: 3, Theta0Deg: -7.3, PeriodMillis: 40}).(*Qube)
	for tick := range 100 {
		y, x := q.Measure(), q.State()
		for i, v := range y {
			counts := v / QubeEncoderResDeg
			if counts != math.Round(counts) {
				t.Fatalf("tick %d: y[%d] = %v is not a multiple of %v", tick, i, v, QubeEncoderResDeg)
			}
			if v*512 != math.Round(v*512) {
				t.Fatalf("tick %d: y[%d] = %v has more than 9 fractional bits", tick, i, v)
			}
			if d := math.Abs(v - x[i]*180/math.Pi); d > QubeEncoderResDeg/2*(1+1e-9) {
				t.Fatalf("tick %d: y[%d] = %v is %v from the true angle, want <= half a count", tick, i, v, d)
			}
		}
		q.Step([]float64{3 * math.Sin(float64(tick))})
	}
	if got, want := encoderDeg(3*math.Pi/180), 34*QubeEncoderResDeg; got != want {
		t.Errorf("encoderDeg(3°): got %v, want %v (34 counts)", got, want)
	}
}

// The amplifier saturates at ±10 V: any larger voltage acts like 10 V.
func TestQubeSaturation(t *testing.T) {
	for _, v := range []float64{10, 11, 1e6, math.Inf(1)} {
		q := mustNew(t, qubeSpec(3)).(*Qube)
		ref := mustNew(t, qubeSpec(3)).(*Qube)
		q.Step([]float64{v})
		ref.Step([]float64{QubeMaxVoltage})
		if q.State() != ref.State() || q.Voltage() != QubeMaxVoltage {
			t.Errorf("Step(%v): got state %v at %v V, want %v at %v V", v, q.State(), q.Voltage(), ref.State(), QubeMaxVoltage)
		}
		q, ref = mustNew(t, qubeSpec(3)).(*Qube), mustNew(t, qubeSpec(3)).(*Qube)
		q.Step([]float64{-v})
		ref.Step([]float64{-QubeMaxVoltage})
		if q.State() != ref.State() {
			t.Errorf("Step(%v): got state %v, want %v", -v, q.State(), ref.State())
		}
	}
}
