// Package plant simulates the plants that the secure controller drives: a
// discrete-time LTI system and the Quanser QUBE-Servo 2 rotary inverted
// pendulum of the paper's testbed (protocol.md §8).
//
// A Plant is sampled: at each tick t the loop calls Measure to read y_t, lets
// the controller compute u_t, and calls Step(u_t) to advance one sampling
// period. Every plant models an input delay of d ticks internally: the u
// passed to Step at tick t acts during the period that starts at tick t+d, and
// the plant sees zero input before the first delayed input arrives. The
// testbed's "u computed at tick t is applied at t+1" is input_delay 1.
//
//	for t := 0; t < ticks; t++ {
//		y := p.Measure()
//		u := controller(y)
//		p.Step(u)
//	}
//
// Plants are described by a JSON Spec (see ParseSpec), for example
//
//	{"kind":"qube-servo2","alpha0_deg":3,"theta0_deg":0,"input_delay":1,"period_ms":40}
//	{"kind":"lti","A":[[1,1],[0,1]],"B":[[0],[1]],"C":[[1,0]],"x0":[1,0],"input_delay":0}
//
// The QUBE model is the nonlinear one of protocol.md §8, integrated with RK4
// in 1 ms steps under a zero-order hold of the (±10 V saturated) voltage, and
// measured through 4096 counts/rev encoders, so its outputs [θ, α] in degrees
// are multiples of 360/4096 = 45/512 degree. Such values have 9 fractional
// bits and are exact in the controller's Q<k,9> encoding.
//
// Plants are not safe for concurrent use.
package plant
