package plant

import "math"

// Physical parameters of the QUBE-Servo 2 with its pendulum (Quanser
// workbook, protocol.md §8). SI units; angles in radians.
const (
	QubeRm = 8.4   // motor terminal resistance, Ω
	QubeKm = 0.042 // back-EMF constant, V·s/rad; equal to the torque constant kt, N·m/A
	QubeMr = 0.095 // rotary arm mass, kg
	QubeLr = 0.085 // rotary arm length, m
	QubeJr = QubeMr * QubeLr * QubeLr / 12
	QubeMp = 0.024 // pendulum mass, kg
	QubeLp = 0.129 // pendulum length, m
	QubeJp = QubeMp * QubeLp * QubeLp / 12
	QubeDr = 0.0015 // arm viscous damping, N·m·s/rad
	QubeDp = 0.0005 // pendulum viscous damping, N·m·s/rad
	QubeG  = 9.81   // gravity, m/s²

	QubeMaxVoltage    = 10   // the amplifier saturates the input at ±QubeMaxVoltage V
	QubeEncoderCounts = 4096 // counts per revolution of both encoders
	// QubeEncoderResDeg is one encoder count in degrees, 45/512, a power-of-two
	// fraction, so quantized angles are exact in float64 and in Q<k,9>.
	QubeEncoderResDeg = 360.0 / QubeEncoderCounts
)

// QubeRK4StepMs is the RK4 step of the simulation in milliseconds; a
// sampling period of period_ms is integrated in period_ms steps.
const QubeRK4StepMs = 1

// QubeDerivative is the continuous-time nonlinear model of protocol.md §8:
// it returns dx/dt for the state x = [θ, α, θ', α'] (rad, rad/s; α = 0
// upright) under motor voltage v, used as is (no saturation). The motor
// torque is τ = km (v − km θ')/Rm, and the two equations of motion
//
//	(Jr + mp Lr² + ¼ mp Lp² sin²α) θ'' − ½ mp Lp Lr cos α α''
//	    = τ − Dr θ' − ½ mp Lp² sin α cos α θ' α' − ½ mp Lp Lr sin α α'²
//	−½ mp Lp Lr cos α θ'' + (Jp + ¼ mp Lp²) α''
//	    = −Dp α' + ¼ mp Lp² sin α cos α θ'² + ½ mp Lp g sin α
//
// are solved for the accelerations by Cramer's rule on the 2×2 mass matrix, which
// is positive definite (it is the kinetic energy's Hessian), so its
// determinant never vanishes.
func QubeDerivative(x [4]float64, v float64) [4]float64 {
	thd, ald := x[2], x[3] // θ', α'
	s, c := math.Sincos(x[1])
	const (
		mpLr   = QubeMp * QubeLr
		mpLp   = QubeMp * QubeLp
		mpLpLr = QubeMp * QubeLp * QubeLr
		mpLp2  = QubeMp * QubeLp * QubeLp
	)
	tau := QubeKm * (v - QubeKm*thd) / QubeRm

	m11 := QubeJr + mpLr*QubeLr + 0.25*mpLp2*s*s
	m12 := -0.5 * mpLpLr * c
	m22 := QubeJp + 0.25*mpLp2
	f1 := tau - QubeDr*thd - 0.5*mpLp2*s*c*thd*ald - 0.5*mpLpLr*s*ald*ald
	f2 := -QubeDp*ald + 0.25*mpLp2*s*c*thd*thd + 0.5*mpLp*QubeG*s

	det := m11*m22 - m12*m12
	thdd := (m22*f1 - m12*f2) / det
	aldd := (m11*f2 - m12*f1) / det
	return [4]float64{thd, ald, thdd, aldd}
}

// QubeLinearization linearizes QubeDerivative at the upright equilibrium
// (x = 0, v = 0) by central differences: dx/dt ≈ A x + B v. It should give
// protocol.md §8's A row 3 = [0, 149.275, -17.007, -4.915], row 4 =
// [0, 261.609, -16.809, -8.614], B = [0, 0, 49.728, 49.149]; a test checks it.
func QubeLinearization() (A [4][4]float64, B [4]float64) {
	// Central differences err by O(h²) from truncation and O(ε/h) from
	// rounding; h = 1e-6 keeps both near 1e-9 relative here.
	const h = 1e-6
	var zero [4]float64
	for j := range 4 {
		xp, xm := zero, zero
		xp[j], xm[j] = h, -h
		fp, fm := QubeDerivative(xp, 0), QubeDerivative(xm, 0)
		for i := range 4 {
			A[i][j] = (fp[i] - fm[i]) / (2 * h)
		}
	}
	fp, fm := QubeDerivative(zero, h), QubeDerivative(zero, -h)
	for i := range 4 {
		B[i] = (fp[i] - fm[i]) / (2 * h)
	}
	return A, B
}

// Qube is the simulated QUBE-Servo 2 of a "qube-servo2" Spec. Its output is
// y = [θ, α] in degrees as the encoders report them, its input the motor
// voltage in volts. Each Step holds the (delayed, saturated) voltage constant
// over the period and integrates QubeDerivative with classic RK4 in steps of
// QubeRK4StepMs.
type Qube struct {
	x     [4]float64 // true state [θ, α, θ', α'], rad and rad/s
	v     float64    // voltage applied over the last period, after saturation
	h     float64    // RK4 step, s
	steps int        // RK4 steps per period
	delay *delayLine
}

// newQube builds the pendulum of a validated spec; stepsPerMs > 1 refines
// the RK4 step below 1 ms (tests use it to check convergence).
func newQube(s Spec, stepsPerMs int) *Qube {
	steps := s.PeriodMillis * stepsPerMs / QubeRK4StepMs
	return &Qube{
		x:     [4]float64{s.Theta0Deg * math.Pi / 180, s.Alpha0Deg * math.Pi / 180, 0, 0},
		h:     float64(s.PeriodMillis) / 1000 / float64(steps),
		steps: steps,
		delay: newDelayLine(s.InputDelay, 1),
	}
}

// Outputs is 2: [θ, α].
func (q *Qube) Outputs() int { return 2 }

// Inputs is 1: the motor voltage.
func (q *Qube) Inputs() int { return 1 }

// Measure returns [θ, α] in degrees, each rounded to the nearest encoder
// count (a multiple of QubeEncoderResDeg, ties away from zero). Rounding
// rather than truncating models an encoder zeroed at the initial angle up to
// half a count. Angles are not wrapped: an encoder counts whole turns.
func (q *Qube) Measure() []float64 {
	return []float64{encoderDeg(q.x[0]), encoderDeg(q.x[1])}
}

// encoderDeg converts an angle in radians to degrees quantized to the
// encoder resolution.
func encoderDeg(rad float64) float64 {
	deg := rad * (180 / math.Pi)
	return math.Round(deg/QubeEncoderResDeg) * QubeEncoderResDeg
}

// Step pushes u = [volts] into the delay line, saturates the voltage that
// comes out of it to ±QubeMaxVoltage and integrates one period under that
// constant voltage (zero-order hold).
func (q *Qube) Step(u []float64) {
	checkInput(u, 1)
	v := max(-QubeMaxVoltage, min(QubeMaxVoltage, q.delay.push(u)[0]))
	q.v = v
	for range q.steps {
		q.x = rk4(q.x, v, q.h)
	}
}

// rk4 is one classic Runge-Kutta step of QubeDerivative.
func rk4(x [4]float64, v, h float64) [4]float64 {
	k1 := QubeDerivative(x, v)
	k2 := QubeDerivative(axpy(x, h/2, k1), v)
	k3 := QubeDerivative(axpy(x, h/2, k2), v)
	k4 := QubeDerivative(axpy(x, h, k3), v)
	for i := range x {
		x[i] += h / 6 * (k1[i] + 2*k2[i] + 2*k3[i] + k4[i])
	}
	return x
}

// axpy returns x + a y.
func axpy(x [4]float64, a float64, y [4]float64) [4]float64 {
	for i := range x {
		x[i] += a * y[i]
	}
	return x
}

// State returns the true state [θ, α, θ', α'] (rad, rad/s), unquantized.
func (q *Qube) State() [4]float64 { return q.x }

// Voltage returns the voltage that acted over the last period (after the
// delay and saturation); 0 before the first Step.
func (q *Qube) Voltage() float64 { return q.v }
