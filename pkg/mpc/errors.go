package mpc

import "errors"

// Sentinel errors. Detail is added by wrapping with %w; callers test with errors.Is.
var (
	ErrModulus      = errors.New("mpc: invalid modulus")
	ErrEvenModulus  = errors.New("mpc: modulus must be odd")
	ErrOutOfRange   = errors.New("mpc: value out of range")
	ErrNotFinite    = errors.New("mpc: value is not finite")
	ErrEncoding     = errors.New("mpc: invalid element encoding")
	ErrDimension    = errors.New("mpc: dimension mismatch")
	ErrUnstable     = errors.New("mpc: controller state matrix A is not Schur stable")
	ErrModulusSmall = errors.New("mpc: modulus too small for the controller")
	// ErrUncertified: A is stable but decays too slowly for the sizing to
	// bound its powers within the powers it computes (spectral radius within
	// about 10^-5 of 1 for a small A; fewer powers for a large one:
	// powerSteps). It also matches ErrParams.
	ErrUncertified = errors.New("mpc: the modulus bound cannot be certified for A")
	ErrParams      = errors.New("mpc: invalid parameters")
	ErrMaterial    = errors.New("mpc: invalid dealer material")
)
