package plant

import (
	"errors"
	"fmt"
)

// ErrSpec is the sentinel behind every spec error; callers test with
// errors.Is. The detail comes from a *FieldError or from wrapping with %w.
var ErrSpec = errors.New("plant: invalid spec")

// FieldError reports a problem with one field of a Spec, named as it is
// spelled in the JSON format ("A", "input_delay", ...).
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("plant: field %q: %s", e.Field, e.Msg)
}

// Unwrap makes errors.Is(err, ErrSpec) hold.
func (e *FieldError) Unwrap() error { return ErrSpec }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
