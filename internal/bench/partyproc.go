package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/duet-mpc/duet/internal/keys"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/party"
)

// The parties in their own processes (ScaleOptions.PartyBin, duet bench
// --party-bin): each party is the party service's binary (a build of
// cmd/party), configured by its DUET_ variables as a deployment configures
// it, with the rig's keys in a directory of its own. What the bench reads
// of an in-process party it reads of these from outside: readiness from
// /readyz, the counters from /metrics and the CPU from /proc.

// partyProc is one party's process.
type partyProc struct {
	id   int
	cmd  *exec.Cmd
	addr string // host:port of its /readyz and /metrics
	out  *tailBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done
}

// tailBuffer keeps the last bytes written to it (a child's output, for the
// error that reports its exit).
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailMax = 4 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailMax {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// writeKeysDir writes the rig's identities into a new directory as `duet
// keys` lays them out (keys.Write).
func (r *rig) writeKeysDir() (string, error) {
	dir, err := os.MkdirTemp("", "duet-bench-keys-")
	if err != nil {
		return "", err
	}
	if err := keys.Write(dir, r.ids.ids); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// freeAddr is a loopback address with a port free at the time of asking.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// partyEnv is party i's environment: the bench's own without its DUET_
// variables (GOMAXPROCS, GOGC and the like reach the party; a DUET_
// variable the service does not know would stop it), and the settings of
// the in-process parties.
func (r *rig) partyEnv(i int, loops []string, persist bool, keysDir, addr string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "DUET_") {
			env = append(env, e)
		}
	}
	env = append(env,
		"DUET_PARTY="+strconv.Itoa(i),
		"DUET_LOOPS="+strings.Join(loops, ","),
		"DUET_NATS_URL="+r.url,
		"DUET_KEYS_DIR="+keysDir,
		"DUET_HTTP_ADDR="+addr,
		"DUET_LOG_LEVEL=warn",
		"DUET_PERSIST="+strconv.FormatBool(persist),
		"DUET_STATE_FILE_STORE="+strconv.FormatBool(r.stateFile),
		"DUET_WRITE_COALESCE="+party.WriteCoalesceFor(r.writeCoalesce).String(),
		"DUET_TWO_HOP="+strconv.FormatBool(r.twoHop))
	if r.peerBatch != 0 {
		env = append(env, "DUET_PEER_BATCH="+strconv.Itoa(r.peerBatch))
	}
	if r.prefetch != 0 {
		env = append(env, "DUET_PREFETCH="+strconv.Itoa(r.prefetch))
	}
	return env
}

// startPartyProc starts party i as r.partyBin.
func (r *rig) startPartyProc(i int, loops []string, persist bool) error {
	r.mu.Lock()
	if r.keysDir == "" {
		dir, err := r.writeKeysDir()
		if err != nil {
			r.mu.Unlock()
			return fmt.Errorf("bench: keys for the party processes: %w", err)
		}
		r.keysDir = dir
	}
	keysDir := r.keysDir
	r.mu.Unlock()
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	p := &partyProc{id: i, addr: addr, out: &tailBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(r.partyBin)
	p.cmd.Env = r.partyEnv(i, loops, persist, keysDir, addr)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	dieWithBench(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("bench: party%d process %s: %w", i, r.partyBin, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	return nil
}

// procList is the party processes started so far.
func (r *rig) procList() []*partyProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*partyProc(nil), r.procs...)
}

// procExited is the error of a party process that has exited, nil while
// all of them run.
func (r *rig) procExited() error {
	for _, p := range r.procList() {
		select {
		case <-p.done:
			status := "exited"
			if p.err != nil {
				status = p.err.Error()
			}
			return fmt.Errorf("bench: party%d process (%s) %s: %s", p.id, r.partyBin, status, p.out.String())
		default:
		}
	}
	return nil
}

// procsReady reports whether both party processes answer /readyz with 200.
func (r *rig) procsReady() bool {
	ps := r.procList()
	if len(ps) < 2 {
		return false
	}
	client := http.Client{Timeout: time.Second}
	for _, p := range ps {
		resp, err := client.Get("http://" + p.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
	}
	return true
}

// stopProcs stops the party processes as a deployment does (SIGTERM: they
// drain), killing any still running after 5 s, and removes the keys.
func (r *rig) stopProcs() {
	ps := r.procList()
	for _, p := range ps {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	// One timer for them all: once it has fired, every process still
	// running is killed (a channel from time.After delivers once only, so
	// a second process that ignored SIGTERM was waited for forever).
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	expired := false
	for _, p := range ps {
		if !expired {
			select {
			case <-p.done:
				continue
			case <-timer.C:
				expired = true
			}
		}
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	r.mu.Lock()
	if r.keysDir != "" {
		os.RemoveAll(r.keysDir)
		r.keysDir = ""
	}
	r.mu.Unlock()
}

// procCPU is each party process's CPU so far (user and system, from
// /proc/<pid>/stat); NaN where it cannot be read.
func (r *rig) procCPU() [2]float64 {
	out := [2]float64{math.NaN(), math.NaN()}
	for _, p := range r.procList() {
		if s, err := pidCPU(p.cmd.Process.Pid); err == nil && p.id >= 0 && p.id < 2 {
			out[p.id] = s
		}
	}
	return out
}

// pidCPU is a process's user and system CPU in seconds.
func pidCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parsePidStatCPU(string(b))
}

// parsePidStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line; the command name (field 2) may hold spaces and
// parentheses, so the fields are counted after its last ')'.
func parsePidStatCPU(s string) (float64, error) {
	k := strings.LastIndexByte(s, ')')
	if k < 0 {
		return 0, fmt.Errorf("proc stat: no command name in %q", s)
	}
	f := strings.Fields(s[k+1:])
	if len(f) < 13 { // state is field 3, f[0]; stime field 15, f[12]
		return 0, fmt.Errorf("proc stat: %d fields after the command name, want 13 or more", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("proc stat: %w", err)
	}
	return float64(u+st) / userHZ, nil
}

// partyCounts are the party counters a scale step reads (both parties).
type partyCounts struct {
	misses, noItem, held     int
	abandoned                map[string]float64
	peerMsgs, envs, peerHeld float64
	fallback                 float64 // two-hop ticks run in three hops (duet_tick_paths_total{path="fallback"})
	rejects                  map[string]float64
	// The processes' own heaps: bytes allocated (go_memstats_alloc_bytes_total)
	// and collections completed (go_gc_duration_seconds' count).
	alloc, gcs float64
}

// add adds the counters of one party's metric families (the Prometheus
// names of internal/metrics).
func (c *partyCounts) add(mfs map[string]*dto.MetricFamily) {
	sum := func(name string) (s float64) {
		if mf := mfs[name]; mf != nil {
			for _, m := range mf.GetMetric() {
				s += m.GetCounter().GetValue()
			}
		}
		return s
	}
	c.misses += int(sum("duet_deadline_misses_total"))
	c.noItem += int(sum("duet_queue_low_water_total"))
	c.held += int(sum("duet_measurements_held_total"))
	c.peerMsgs += sum("duet_peer_messages_total")
	c.envs += sum("duet_peer_envelopes_total")
	c.peerHeld += sum("duet_peer_held_total")
	// by adds counter name's values by their label's value into into.
	by := func(into map[string]float64, name, label string) map[string]float64 {
		if into == nil {
			into = map[string]float64{}
		}
		for _, m := range mfs[name].GetMetric() { // nil family: none
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					into[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
		return into
	}
	c.abandoned = by(c.abandoned, "duet_ticks_abandoned_total", "reason")
	c.rejects = by(c.rejects, "duet_rejects_total", "reason")
	c.fallback += by(nil, "duet_tick_paths_total", "path")["fallback"]
	c.alloc += sum("go_memstats_alloc_bytes_total")
	for _, m := range mfs["go_gc_duration_seconds"].GetMetric() {
		c.gcs += float64(m.GetSummary().GetSampleCount())
	}
}

// addSet adds the counters of a party in the bench's process (its
// metrics.Set), the same ones add reads from a party process's /metrics.
func (c *partyCounts) addSet(m *metrics.Set) {
	c.misses += int(metrics.Sum(m.Misses))
	c.noItem += int(metrics.Sum(m.LowWater))
	c.held += int(metrics.Sum(m.Held))
	c.peerMsgs += metrics.Value(m.PeerMessages)
	c.envs += metrics.Value(m.PeerEnvelopes)
	c.peerHeld += metrics.Value(m.PeerHeld)
	c.fallback += metrics.SumBy(m.TickPaths, "path")["fallback"]
	if c.abandoned == nil {
		c.abandoned = map[string]float64{}
	}
	if c.rejects == nil {
		c.rejects = map[string]float64{}
	}
	for reason, v := range metrics.SumBy(m.Abandoned, "reason") {
		c.abandoned[reason] += v
	}
	for reason, v := range metrics.SumBy(m.Rejects, "reason") {
		c.rejects[reason] += v
	}
}

// procCounts reads both party processes' counters from their /metrics.
func (r *rig) procCounts(ctx context.Context) (partyCounts, error) {
	c := partyCounts{abandoned: map[string]float64{}, rejects: map[string]float64{}}
	for _, p := range r.procList() {
		mfs, err := p.metrics(ctx)
		if err != nil {
			return c, err
		}
		c.add(mfs)
	}
	return c, nil
}

// procTicks reads each party process's completed ticks of loop
// (duet_ticks_total).
func (r *rig) procTicks(ctx context.Context, loop string) (n [2]float64, err error) {
	for _, p := range r.procList() {
		mfs, err := p.metrics(ctx)
		if err != nil {
			return n, err
		}
		for _, m := range mfs["duet_ticks_total"].GetMetric() { // nil family: none yet
			for _, l := range m.GetLabel() {
				if l.GetName() == "loop" && l.GetValue() == loop && p.id >= 0 && p.id < 2 {
					n[p.id] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n, nil
}

// metrics reads the process's metric families from its /metrics.
func (p *partyProc) metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	client := http.Client{Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: party%d process's metrics: %w", p.id, err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: party%d process's metrics: %w", p.id, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("bench: party%d process's metrics: %w", p.id, err)
	}
	return mfs, nil
}
