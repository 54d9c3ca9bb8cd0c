//go:build !race

package dealer

const raceEnabled = false
