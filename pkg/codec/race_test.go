//go:build race

package codec

// raceEnabled: the race detector drops a quarter of sync.Pool puts at
// random, so allocation counts are not exact under it.
const raceEnabled = true
