package party

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/natstest"
)

// BenchmarkStateWrites measures what one state write costs the whole
// process (client and embedded JetStream server: the "cpu-ns/write"
// metric, from getrusage), the way the party writes: one KV message per
// loop and tick, compare-and-set on the key's last revision
// (Nats-Expected-Last-Subject-Sequence), a burst of writes for many loops
// in flight at once (500; 10 and 100: how a burst's size changes the cost
// per write), then every acknowledgement awaited, in memory storage (as
// duet bench persists). Beside it: the same writes without the
// compare-and-set ("blind": what the fence costs), to file storage
// (DUET_STATE_FILE_STORE, the services' default), and as JetStream's batch
// publishing of nats-server 2.12+ would send them (one acknowledgement per
// batch): atomic batches (Nats-Batch-Id/-Sequence/-Commit headers, the
// stream's allow_atomic) and fast batches (the reply-subject protocol, the
// stream's allow_batched). It is the measurement behind README's "tried
// and not kept": batching the acknowledgements saves nothing, because the
// cost is the server storing each message, not answering it. "journal"
// measures the lever that is left, not built: one stored message carrying
// the records of 20 or 100 loops (compare-and-set on the journal's own
// key), the CPU still counted per loop's record.
func BenchmarkStateWrites(b *testing.B) {
	for _, c := range []struct {
		name  string
		mode  string
		loops int // the loops (keys) a burst writes
		batch int
	}{
		{"kv-write-each", "each", 500, 1},
		{"kv-write-each-10-loops", "each", 10, 1},
		{"kv-write-each-100-loops", "each", 100, 1},
		{"kv-write-each-blind", "blind", 500, 1},
		{"kv-write-each-file", "file", 500, 1},
		{"atomic-batch-20", "atomic", 500, 20},
		{"atomic-batch-100", "atomic", 500, 100},
		{"fast-batch-20", "fast", 500, 20},
		{"fast-batch-100", "fast", 500, 100},
		{"journal-20", "journal", 500, 20},
		{"journal-100", "journal", 500, 100},
	} {
		b.Run(c.name, func(b *testing.B) { benchStateWrites(b, c.mode, c.loops, c.batch) })
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchStateWrites(b *testing.B, mode string, stateWriteLoops, batch int) {
	nc := natstest.Conn(b)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	storage := jetstream.MemoryStorage
	if mode == "file" {
		storage = jetstream.FileStorage
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench-state", History: 1, Storage: storage})
	if err != nil {
		b.Fatal(err)
	}
	if mode == "atomic" || mode == "fast" {
		s, err := js.Stream(ctx, "KV_bench-state")
		if err != nil {
			b.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.AllowAtomicPublish, cfg.AllowBatchPublish = mode == "atomic", mode == "fast"
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			b.Fatal(err)
		}
	}
	if stateWriteLoops%batch != 0 {
		b.Fatalf("a batch of %d does not divide %d loops", batch, stateWriteLoops)
	}
	record := make([]byte, 200) // a sealed pendulum record is about this size
	inbox := nats.NewInbox()
	for i := 0; i < stateWriteLoops; i++ {
		if _, err := kv.Put(ctx, "loop"+strconv.Itoa(i), record); err != nil {
			b.Fatal(err)
		}
	}
	// Every write is stored, in order, by this one writer: key i's revision
	// after burst n (from 0) is stateWriteLoops*(n+1) + i + 1; a journal
	// message j's (from 0) is stateWriteLoops + j + 2.
	var journal []*nats.Msg
	if mode == "journal" {
		if _, err := kv.Put(ctx, "journal", record); err != nil {
			b.Fatal(err)
		}
		for k := 0; k < stateWriteLoops/batch; k++ {
			m := nats.NewMsg("$KV.bench-state.journal")
			m.Data, m.Reply = make([]byte, batch*len(record)), inbox+".j"+strconv.Itoa(k)
			journal = append(journal, m)
		}
	}
	// Acknowledgements a burst waits for: one per write, or one per batch
	// (atomic, fast) or journal message.
	acksPerBurst := stateWriteLoops / batch
	if mode == "each" || mode == "blind" || mode == "file" {
		acksPerBurst = stateWriteLoops
	}
	var acks, failed atomic.Int64
	var lastErr atomic.Value
	done := make(chan struct{}, 1)
	sub, err := nc.Subscribe(inbox+".>", func(m *nats.Msg) {
		var ack struct {
			Stream string `json:"stream"`
			Error  *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if len(m.Data) == 0 || json.Unmarshal(m.Data, &ack) != nil {
			return // an atomic batch's empty ack, a fast batch's flow message
		}
		switch {
		case ack.Error != nil:
			failed.Add(1)
			lastErr.Store(ack.Error.Description)
		case ack.Stream == "":
			return // a fast batch's flow-control message
		}
		if acks.Add(1) == int64(acksPerBurst) {
			done <- struct{}{}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	var msgs []*nats.Msg // one per loop's record; none with a journal, whose messages carry them
	if mode != "journal" {
		msgs = make([]*nats.Msg, stateWriteLoops)
	}
	for i := range msgs {
		msgs[i] = nats.NewMsg("$KV.bench-state.loop" + strconv.Itoa(i))
		msgs[i].Data = record
	}
	batchID := 0
	cpu0 := processCPU()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		acks.Store(0)
		for k, m := range journal {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.Itoa(stateWriteLoops+n*len(journal)+k+1))
			if err := nc.PublishMsg(m); err != nil {
				b.Fatal(err)
			}
		}
		for i, m := range msgs {
			if mode != "blind" {
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.Itoa(stateWriteLoops*n+i+1))
			}
			pos := i % batch
			if pos == 0 {
				batchID++
			}
			last := pos == batch-1
			switch mode {
			case "each", "blind", "file":
				m.Reply = inbox + "." + strconv.Itoa(i)
			case "atomic":
				m.Header.Set("Nats-Batch-Id", "b"+strconv.Itoa(batchID))
				m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(pos+1))
				if last {
					m.Header.Set("Nats-Batch-Commit", "1")
					m.Reply = inbox + ".c"
				}
			case "fast":
				// <prefix>.<batch id>.<flow>.<gap mode>.<batch seq>.<op>.$FI
				// with op 0 start, 1 append, 2 commit.
				op := 1
				if pos == 0 {
					op = 0
				} else if last {
					op = 2
				}
				m.Reply = fmt.Sprintf("%s.b%d.%d.fail.%d.%d.$FI", inbox, batchID, batch, pos+1, op)
			}
			if err := nc.PublishMsg(m); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.Fatalf("%d of %d acknowledgements after 10 s (%d refused: %v)", acks.Load(), acksPerBurst, failed.Load(), lastErr.Load())
		}
		if failed.Load() > 0 {
			b.Fatalf("%d writes refused: %v", failed.Load(), lastErr.Load())
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N*stateWriteLoops), "cpu-ns/write")
	// ns/op is a burst's wall time; per write, as the CPU:
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*stateWriteLoops), "ns/write")
}
