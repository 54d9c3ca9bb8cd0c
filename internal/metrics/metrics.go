// Package metrics defines the Prometheus metrics every duet service exports.
// Each service gets its own registry so that several services can share a
// process (the demo) without clashing.
package metrics

import (
	"errors"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/duet-mpc/duet/pkg/codec"
)

// Set is one service's metrics.
type Set struct {
	Reg *prometheus.Registry

	Rejects        *prometheus.CounterVec // reason
	Ticks          *prometheus.CounterVec // loop
	Misses         *prometheus.CounterVec // loop
	Abandoned      *prometheus.CounterVec // loop, reason: why a party abandoned a tick
	Held           *prometheus.CounterVec // loop: measurements held for an open tick
	Mismatches     *prometheus.CounterVec // loop, kind (item|version): the parties disagreed
	ItemsConsumed  *prometheus.CounterVec // loop
	ItemsPrepared  *prometheus.CounterVec // loop
	ItemsDiscarded *prometheus.CounterVec // loop
	ItemsPublished *prometheus.CounterVec // loop
	QueueDepth     *prometheus.GaugeVec   // loop
	LowWater       *prometheus.CounterVec // loop
	QueueFull      *prometheus.CounterVec // loop
	PublishErrors  *prometheus.CounterVec // loop: dealer refill rounds that failed
	// TickPaths: loop, path: the two-hop tick's use (sensor: two_hop or
	// three_hop; parties: two_hop or fallback).
	TickPaths  *prometheus.CounterVec
	Reconnects prometheus.Counter
	// NATSErrors: kind (NATSErrorKinds): the connection's asynchronous
	// errors (CountNATSError).
	NATSErrors *prometheus.CounterVec
	// The party's messages to the other party: NATS messages, and the
	// protocol messages (envelopes) they carried (more when batched).
	PeerMessages, PeerEnvelopes prometheus.Counter
	// PeerHeld counts P0's Protocol 2 messages held for the deferred work's
	// batch (party.Service.deferPeer).
	PeerHeld    prometheus.Counter
	TickLatency *prometheus.HistogramVec // loop, seconds
}

// RejectReasons are every value of duet_rejects_total's reason label: the
// codec's (codec.Reasons), and the services' own overload and late.
func RejectReasons() []string { return append(codec.Reasons(), "overload", "late") }

// The values of duet_mismatches_total's kind label.
const (
	KindItem    = "item"
	KindVersion = "version"
)

// MismatchKinds are the values of duet_mismatches_total's kind label.
var MismatchKinds = []string{KindItem, KindVersion}

// The values of duet_tick_paths_total's path label: the sensor's two_hop
// and three_hop, the parties' two_hop and fallback.
const (
	PathTwoHop   = "two_hop"
	PathThreeHop = "three_hop"
	PathFallback = "fallback"
)

// TickPathLabels are the values of duet_tick_paths_total's path label.
var TickPathLabels = []string{PathTwoHop, PathThreeHop, PathFallback}

// Zero exports each vector's series for one label set (in the vector's
// label order) at 0, before its first event. A counter series that first
// appears with its first event shows Prometheus no increase, so an alert on
// increase() would miss that event and any that came with it in the scrape
// interval: a single forged message, the first miss of a loop.
func Zero(values []string, vs ...*prometheus.CounterVec) {
	for _, v := range vs {
		v.WithLabelValues(values...)
	}
}

// LatencyBuckets end at the 40 ms tick period and its deadline.
var LatencyBuckets = []float64{50e-6, 100e-6, 150e-6, 200e-6, 300e-6, 500e-6, 750e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 30e-3, 40e-3, 80e-3}

// New creates the metrics for a service; service, the value of every duet_
// metric's service label, is its role ("party0", "actuator", ...).
func New(service string) *Set {
	reg := prometheus.NewRegistry()
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "duet", Name: name, Help: help,
			ConstLabels: prometheus.Labels{"service": service}}, labels)
		reg.MustRegister(v)
		return v
	}
	s := &Set{Reg: reg}
	s.Rejects = c("rejects_total", "Inbound messages rejected, by reason.", "reason")
	for _, r := range RejectReasons() {
		Zero([]string{r}, s.Rejects)
	}
	s.Ticks = c("ticks_total", "Ticks completed.", "loop")
	s.Misses = c("deadline_misses_total", "Ticks that missed their deadline or were abandoned.", "loop")
	s.Abandoned = c("ticks_abandoned_total", "Ticks a party abandoned (each also counts in deadline_misses_total), by reason: late (the tick had not ended when the next measurement came and could not be held for, or a held measurement was given up), not_persisted (the previous state write was not acknowledged), no_item (no offline item in time), item_mismatch, version_mismatch (see mismatches_total), not_ready (the measurement came before the fixed-mask set-up was complete: a party restarting waits for the other's S share), error (a computation failed on accepted input).", "loop", "reason")
	s.Held = c("measurements_held_total", "Measurements a party held because the previous tick was still open (late), to start their tick when that one ends instead of abandoning it (one given up counts in ticks_abandoned_total as late).", "loop")
	s.Mismatches = c("mismatches_total", "Ticks where the parties disagreed (resynchronized), by kind: item (different offline items, by id or serial: a queue fault, or a broker that paired different items under one sequence) or version (state versions: one party abandoned a tick its peer finished).", "loop", "kind")
	s.ItemsConsumed = c("items_consumed_total", "Offline items used.", "loop")
	s.ItemsPrepared = c("items_prepared_total", "Fixed-mask ticks whose item was prepared between ticks (half the product off the critical path).", "loop")
	s.ItemsDiscarded = c("items_discarded_total", "Offline items discarded unused (resynchronization, stale).", "loop")
	s.ItemsPublished = c("items_published_total", "Offline items published by dealers.", "loop")
	s.LowWater = c("queue_low_water_total", "Times a loop's offline queue was found below its low-water mark.", "loop")
	s.QueueFull = c("queue_full_total", "Refill rounds a dealer found a loop's offline queue full (DUET_QUEUE_MAX) while it was below its low-water mark: one party is far behind the other, or down; the dealer then backs off, up to DUET_POLL_MAX between rounds.", "loop")
	s.PublishErrors = c("offline_publish_errors_total", "Refill rounds a dealer could not complete for a reason other than a full queue: an item it could not draw or seal, or a message the server refused or did not acknowledge, or the loop's stream could not be looked up, or its queue depth could not be checked a second time in a row (the dealer logs why); the dealer then backs off as for a full queue.", "loop")
	s.TickPaths = c("tick_paths_total", "Ticks by path, with DUET_TWO_HOP on: the sensor's two_hop (a masked measurement sent: both parties had announced the item's mask) or three_hop (shares sent); a party's two_hop (the exchange was done between ticks) or fallback (a masked measurement run with the exchange after it: the other party's pre-opening was missing or disagreed).", "loop", "path")
	s.QueueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "duet", Name: "queue_depth",
		Help: "Offline queue depth (items).", ConstLabels: prometheus.Labels{"service": service}}, []string{"loop"})
	reg.MustRegister(s.QueueDepth)
	s.NATSErrors = c("nats_errors_total", "Errors the NATS connection reported asynchronously, by kind: permission (the server denied a publish or subscription: the service's messages on that subject are lost), slow_consumer (a subscription's buffer overflowed: messages dropped), other.", "kind")
	for _, k := range NATSErrorKinds {
		Zero([]string{k}, s.NATSErrors)
	}
	s.Reconnects = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "duet", Name: "nats_reconnects_total",
		Help: "NATS reconnections.", ConstLabels: prometheus.Labels{"service": service}})
	reg.MustRegister(s.Reconnects)
	s.PeerMessages = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "duet", Name: "peer_messages_total",
		Help: "NATS messages this party sent to the other party (a batch counts once).", ConstLabels: prometheus.Labels{"service": service}})
	s.PeerEnvelopes = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "duet", Name: "peer_envelopes_total",
		Help: "Protocol messages this party sent to the other party, batched or not.", ConstLabels: prometheus.Labels{"service": service}})
	s.PeerHeld = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "duet", Name: "peer_held_total",
		Help: "P0's Protocol 2 messages held for the batch of the deferred work of other loops (at most DUET_PERSIST_DELAY), rather than sent alone.", ConstLabels: prometheus.Labels{"service": service}})
	reg.MustRegister(s.PeerMessages, s.PeerEnvelopes, s.PeerHeld)
	s.TickLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "duet", Name: "tick_latency_seconds",
		Help: "Sensor publish to actuator reconstruction.", Buckets: LatencyBuckets,
		ConstLabels: prometheus.Labels{"service": service}}, []string{"loop"})
	reg.MustRegister(s.TickLatency)
	// The process and its Go runtime, scheduler included: a party whose
	// host has no CPU to spare shows it first as goroutines waiting to run
	// (go_sched_latencies_seconds), before its ticks come late.
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)))
	return s
}

// NATSErrorKinds are the values of duet_nats_errors_total's kind label.
var NATSErrorKinds = []string{"permission", "slow_consumer", "other"}

// CountNATSError counts an asynchronous error of the service's NATS
// connection by kind (bus.CountAsyncErrors).
func (s *Set) CountNATSError(err error) {
	kind := "other"
	switch {
	case errors.Is(err, nats.ErrPermissionViolation):
		kind = "permission"
	case errors.Is(err, nats.ErrSlowConsumer):
		kind = "slow_consumer"
	}
	s.NATSErrors.WithLabelValues(kind).Inc()
}

// Reject counts a rejected message by the codec's reason label.
func (s *Set) Reject(err error) { s.Rejects.WithLabelValues(codec.Reason(err)).Inc() }

// Handler serves /metrics.
func (s *Set) Handler() http.Handler { return promhttp.HandlerFor(s.Reg, promhttp.HandlerOpts{}) }

// Sum is the sum of a counter vector's samples (reports and benchmarks).
func Sum(v *prometheus.CounterVec) float64 {
	var s float64
	for _, x := range SumBy(v, "") {
		s += x
	}
	return s
}

// SumBy sums a counter vector's samples by the value of one label ("" for
// all of them under the key "").
func SumBy(v *prometheus.CounterVec, label string) map[string]float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		v.Collect(ch)
		close(ch)
	}()
	s := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil || d.Counter == nil {
			continue
		}
		key := ""
		if label != "" {
			for _, lp := range d.Label {
				if lp.GetName() == label {
					key = lp.GetValue()
				}
			}
		}
		s[key] += d.Counter.GetValue()
	}
	return s
}

// Value reads a counter.
func Value(c prometheus.Counter) float64 {
	var d dto.Metric
	if c.Write(&d) != nil || d.Counter == nil {
		return 0
	}
	return d.Counter.GetValue()
}
