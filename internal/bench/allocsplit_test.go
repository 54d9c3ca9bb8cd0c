package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestAllocComponent(t *testing.T) {
	for fn, want := range map[string]string{
		"github.com/nats-io/nats-server/v2/server.(*client).readLoop":    "nats-server",
		"github.com/nats-io/nats%2ego.(*Conn).processMsg":                "nats-client",
		"github.com/nats-io/nats.go/jetstream.(*pullConsumer).Consume":   "nats-client",
		"github.com/duet-mpc/duet/internal/party.(*worker).material":     "duet",
		"github.com/duet-mpc/duet/internal/bench.(*lightLoop).run":       "harness",
		"github.com/duet-mpc/duet/pkg/codec.(*Sealer).SealAppend":        "", // whoever called it
		"golang.org/x/crypto/chacha20poly1305.(*xchacha20poly1305).Open": "",
		"runtime.mallocgc": "",
	} {
		if got := allocComponent(fn); got != want {
			t.Errorf("allocComponent(%q) = %q, want %q", fn, got, want)
		}
	}
}

// allocSink keeps the test's allocations alive until the profile is taken.
var allocSink [][]byte

//go:noinline
func allocateHere(n, size int) {
	for range n {
		allocSink = append(allocSink, make([]byte, size))
	}
}

// TestAllocSplit: a profiled window's allocations are counted for the
// component on whose stack they were made: 4 MB from this package (the
// harness) and the messages nats.go builds (the client), nothing of
// either before the window.
func TestAllocSplit(t *testing.T) {
	defer func(r int) { runtime.MemProfileRate = r }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1 // every allocation sampled: exact counts
	base := filepath.Join(t.TempDir(), "w")
	allocateHere(2000, 4096) // 8 MB before the window: not counted
	stop := startProfileExtras(base)
	allocateHere(1000, 4096)
	msgs := make([]*nats.Msg, 0, 2000)
	for i := range 2000 {
		msgs = append(msgs, nats.NewMsg("duet.test."+strconv.Itoa(i)))
	}
	stop()
	runtime.KeepAlive(msgs)
	allocSink = nil

	b, err := os.ReadFile(base + ".alloc-split.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1+len(allocWho) || lines[0] != "who,bytes,share" {
		t.Fatalf("alloc split:\n%s", b)
	}
	by := map[string]float64{}
	share := 0.0
	for i, l := range lines[1:] {
		f := strings.Split(l, ",")
		v, err1 := strconv.ParseFloat(f[1], 64)
		s, err2 := strconv.ParseFloat(f[2], 64)
		if len(f) != 3 || f[0] != allocWho[i] || err1 != nil || err2 != nil || v < 0 || s < 0 || s > 1 {
			t.Fatalf("alloc split line %q", l)
		}
		by[f[0]] = v
		share += s
	}
	// 1,000 × 4 KB from allocateHere, the slice headers' growth besides;
	// the 8 MB before the window are not in it.
	if h := by["harness"]; h < 4096*1000 || h > 4096*1000*2 {
		t.Errorf("harness allocated %.0f bytes in the window, want 4,096,000 and its slice's growth:\n%s", h, b)
	}
	if by["nats-client"] < 2000*100 {
		t.Errorf("nats.go allocated %.0f bytes for 2,000 messages:\n%s", by["nats-client"], b)
	}
	if by["nats-server"] != 0 || by["duet"] != 0 {
		t.Errorf("allocations counted for a server or a service that did not run:\n%s", b)
	}
	if share < 0.999 || share > 1.001 {
		t.Errorf("shares sum to %.4f:\n%s", share, b)
	}
}
