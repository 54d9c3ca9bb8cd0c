package keys

import "errors"

// Sentinel errors; each is wrapped with the file it concerns.
var (
	ErrExist       = errors.New("keys: key file already exists")
	ErrPermissions = errors.New("keys: secret key file is accessible to group or others")
	ErrFile        = errors.New("keys: invalid key file")
)
