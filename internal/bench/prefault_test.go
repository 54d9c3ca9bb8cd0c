package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestPrefaultHeapSparesFaults grows a heap by the same bytes twice, once
// after its memory was returned to the OS (as quiesce leaves a scale step's)
// and once after prefaultHeap, and counts the minor page faults each growth
// takes: the prefaulted one must take a small fraction of the cold one's.
func TestPrefaultHeapSparesFaults(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(400)) // as duet bench runs
	const chunk = 32 << 10
	touch := func(b []byte) {
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
	}
	// 48 MB live, so that the heap's goal leaves 192 MB of headroom.
	var live [][]byte
	for n := 0; n < 48<<20; n += chunk {
		b := make([]byte, chunk)
		touch(b)
		live = append(live, b)
	}
	const growth = 96 << 20
	grow := func() int64 {
		f0 := minorFaults()
		var g [][]byte
		for n := 0; n < growth; n += chunk {
			b := make([]byte, chunk)
			touch(b)
			g = append(g, b)
		}
		runtime.KeepAlive(g)
		return minorFaults() - f0
	}
	debug.FreeOSMemory()
	cold := grow()
	debug.FreeOSMemory()
	touched := prefaultHeap()
	// The runtime's background scavenger returns free memory it finds
	// over its goal to the OS, a little at a time: a step's floor runs
	// for seconds before the loops grow the heap.
	time.Sleep(2 * time.Second)
	warm := grow()
	runtime.KeepAlive(live)
	t.Logf("growth of %d MB: %d faults cold, %d after prefaulting %d MB", growth>>20, cold, warm, touched>>20)
	if touched < growth {
		t.Fatalf("prefaultHeap touched %d MB, want at least the %d MB the heap then grows by (its goal less its live objects)", touched>>20, growth>>20)
	}
	if pages := int64(growth / 4096); cold < pages/2 {
		t.Skipf("the cold growth took %d faults for %d pages: this system does not fault a heap in page by page (huge pages?)", cold, pages)
	}
	if warm*4 > cold {
		t.Fatalf("growth after prefaultHeap took %d faults, the cold one %d: want under a quarter", warm, cold)
	}
}

// TestPrefaultHeapCollectorOff runs prefaultHeap with the collector off,
// whose heap goal is the memory limit (about 2^63 bytes by default): the
// touch must stay within maxPrefault instead of trying to allocate that.
func TestPrefaultHeapCollectorOff(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer func(m uint64) { maxPrefault = m }(maxPrefault)
	maxPrefault = 64 << 20
	if n := prefaultHeap(); n == 0 || n > maxPrefault {
		t.Fatalf("prefaultHeap with the collector off touched %d bytes, want 1 to %d", n, maxPrefault)
	}
}

func TestPrefaultSize(t *testing.T) {
	defer func(m uint64) { maxPrefault = m }(maxPrefault)
	maxPrefault = 1 << 30
	for _, c := range []struct{ goal, live, avail, want uint64 }{
		{goal: 100, live: 100, want: 0},
		{goal: 100, live: 200, avail: 1 << 40, want: 0},
		{goal: 300 << 20, live: 100 << 20, want: 200 << 20},
		{goal: 300 << 20, live: 100 << 20, avail: 1 << 40, want: 200 << 20},
		{goal: 300 << 20, live: 100 << 20, avail: 100 << 20, want: 50 << 20},
		{goal: 1 << 62, live: 100 << 20, want: 1 << 30},
		{goal: 1 << 62, live: 100 << 20, avail: 1 << 30, want: 512 << 20},
	} {
		if got := prefaultSize(c.goal, c.live, c.avail); got != c.want {
			t.Errorf("prefaultSize(%d, %d, %d) = %d, want %d", c.goal, c.live, c.avail, got, c.want)
		}
	}
	if a := memAvailable(); a == 0 && runtime.GOOS == "linux" {
		t.Error("memAvailable read nothing from /proc/meminfo")
	}
}

// A container's memory limit bounds what the touch may take: its cgroup's
// memory.max less memory.current, nothing without a limit.
func TestCgroupAvailable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := cgroupAvailable(dir); ok {
		t.Fatal("no memory.max: want no limit")
	}
	write("memory.max", "max")
	write("memory.current", "1000")
	if _, ok := cgroupAvailable(dir); ok {
		t.Fatal(`memory.max "max": want no limit`)
	}
	write("memory.max", "4096")
	if n, ok := cgroupAvailable(dir); !ok || n != 3096 {
		t.Fatalf("memory.max 4096, memory.current 1000: got %d, %v; want 3096", n, ok)
	}
	write("memory.current", "5000")
	if n, ok := cgroupAvailable(dir); !ok || n != 0 {
		t.Fatalf("over the limit: got %d, %v; want 0 and a limit", n, ok)
	}
}
