package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"
)

// startProfile profiles a section into Out/pprof/<section>.pprof. The scale
// section profiles each step's measurement window instead (its set-up and
// prefill would dominate a profile of the whole section).
func startProfile(opt Options, section string) (func(), error) {
	if !opt.Profile || section == SectionScale {
		return func() {}, nil
	}
	dir := filepath.Join(opt.Out, "pprof")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return startCPUProfile(filepath.Join(dir, section+".pprof"))
}

// startCPUProfile profiles the CPU into path, and goroutine blocking and
// mutex contention into path with .block / .mutex in place of .pprof: at
// scale, latency comes from waiting as much as from computing. The heap's
// allocation counts at the start and the end (.allocs-start, .allocs) give
// the window's allocations: go tool pprof -diff_base X.allocs-start X.allocs.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	extras := startProfileExtras(strings.TrimSuffix(path, ".pprof"))
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		extras()
	}, nil
}

// startProfileExtras starts what startCPUProfile adds to the CPU profile
// (base.allocs-start now; base.block, base.mutex, base.allocs,
// base.goroutine (the goroutines alive at the window's end), the window's
// allocated bytes by component in base.alloc-split.csv (allocsplit.go) and,
// with DUET_BENCH_TRACE=1, base.trace when the returned function is called).
func startProfileExtras(base string) func() {
	// The allocation profile is as of the last GC: collect first so that
	// the difference holds this window's allocations, not earlier ones.
	runtime.GC()
	allocs0 := profileBytes("allocs")
	if allocs0 != nil {
		_ = os.WriteFile(base+".allocs-start", allocs0, 0o644)
	}
	runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	runtime.SetMutexProfileFraction(10)
	// DUET_BENCH_TRACE=1 adds an execution trace (.trace; large): scheduler
	// latency and goroutine waits, for `go tool trace`.
	var tf *os.File
	if os.Getenv("DUET_BENCH_TRACE") == "1" {
		var err error
		if tf, err = os.Create(base + ".trace"); err == nil {
			if trace.Start(tf) != nil {
				tf.Close()
				tf = nil
			}
		}
	}
	return func() {
		if tf != nil {
			trace.Stop()
			tf.Close()
		}
		runtime.GC()
		profs := map[string][]byte{}
		for _, name := range []string{"block", "mutex", "allocs", "goroutine"} {
			if p := profileBytes(name); p != nil {
				_ = os.WriteFile(base+"."+name, p, 0o644)
				profs[name] = p
			}
		}
		// Who allocated the window's bytes (allocsplit.go); a profile
		// missing at either end fails to parse and writes nothing.
		if by, err := allocSplit(allocs0, profs["allocs"]); err == nil {
			_ = writeAllocSplit(base+".alloc-split.csv", by)
		}
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
	}
}

// profileBytes is the named runtime profile (runtime/pprof), nil if it
// could not be written.
func profileBytes(name string) []byte {
	var b bytes.Buffer
	if pprof.Lookup(name).WriteTo(&b, 0) != nil {
		return nil
	}
	return b.Bytes()
}
