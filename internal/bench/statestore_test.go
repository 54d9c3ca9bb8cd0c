package bench

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStateFileStore: with Plan.StateFileStore (duet bench
// --state-file-store) the parties' state buckets are created in JetStream
// file storage, as the services create them by default; without it, in
// memory. The buckets' streams are read as the server announces them
// (the rig removes them when a case ends); the report and tick_detail.csv
// say which storage the persisted rows used.
func TestStateFileStore(t *testing.T) {
	for _, file := range []bool{true, false} {
		url := startServer(t)
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		storage := map[string]jetstream.StorageType{}
		if _, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.CREATED.>", func(m *nats.Msg) {
			name := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
			if !strings.HasPrefix(name, "KV_duet-state-party") {
				return
			}
			s, err := js.Stream(context.Background(), name)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			storage[name] = s.CachedInfo().Config.Storage
		}); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		plan := Plan{Ticks: 10, TickWarmup: 5, TickBlock: 5, StateFileStore: file}
		rep, err := Run(context.Background(), Options{URL: url, Out: out, Sections: []string{SectionTick}, Examples: "../../examples/qube-servo2", Plan: &plan})
		nc.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := jetstream.MemoryStorage
		if file {
			want = jetstream.FileStorage
		}
		mu.Lock()
		if len(storage) != 2 {
			t.Errorf("file=%v: state streams %v, want both parties'", file, storage)
		}
		for name, got := range storage {
			if got != want {
				t.Errorf("file=%v: %s in %v storage, want %v", file, name, got, want)
			}
		}
		mu.Unlock()
		if rep.StateFileStore != file {
			t.Errorf("file=%v: report says StateFileStore=%v", file, rep.StateFileStore)
		}
		recs := readCSV(t, filepath.Join(out, "tick_detail.csv"))
		persistCol, fileCol := slices.Index(recs[0], "persist"), slices.Index(recs[0], "state_file_store")
		persisted := 0
		for _, r := range recs[1:] {
			if wantCol := r[persistCol] == "true" && file; (r[fileCol] == "true") != wantCol {
				t.Errorf("file=%v: tick_detail.csv row %q: state_file_store %s", file, r, r[fileCol])
			}
			if r[persistCol] == "true" {
				persisted++
			}
		}
		if persisted == 0 || persisted == len(recs)-1 {
			t.Errorf("file=%v: %d of %d rows persisted; want the persisted and the unpersisted pendulum cases", file, persisted, len(recs)-1)
		}
	}
}
