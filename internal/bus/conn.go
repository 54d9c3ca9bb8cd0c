package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PingInterval is how often a connection pings its server; after
// MaxPingsOut unanswered pings the connection is taken as lost and
// reconnects, to another server of the URL list if there is one. nats.go's
// default, every 2 minutes, left a service connected, and ready, for up to
// 6 minutes to a server that had vanished without closing the connection
// (its host down, a partition), every tick missing.
const (
	PingInterval = 5 * time.Second
	MaxPingsOut  = 2
)

// Connect dials NATS with reconnection forever and logs connection events.
// opts are appended (credentials, TLS, ...).
func Connect(url, name string, log *slog.Logger, onReconnect func(), opts ...nats.Option) (*nats.Conn, error) {
	errs := NewLogLimit()
	attemptFailed := func(err error) {
		if ok, suppressed := errs.Allow("connect\x00" + attemptKey(err)); ok {
			log.Warn("nats connection attempt failed; retrying", "url", RedactURL(url), "err", err, "repeats_not_logged", suppressed)
		}
	}
	// One watcher at a time: nats.go calls the disconnect handler on every
	// disconnection, and on Close too.
	var watching atomic.Bool
	every := reconnectWatch // read here, not by the watcher (the tests set it)
	watch := func(c *nats.Conn) {
		if watching.CompareAndSwap(false, true) {
			go func() {
				for {
					watchReconnect(c, every, attemptFailed)
					watching.Store(false)
					// A disconnection between the watcher's last look
					// and the store found it still watching and started
					// none: that outage is watched here.
					if !c.IsReconnecting() || !watching.CompareAndSwap(false, true) {
						return
					}
				}
			}()
		}
	}
	base := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		// Forever also after a refused login: nats.go otherwise closes the
		// connection for good when one server refuses it twice in a row
		// (credentials the server does not know yet, as while keys are
		// rotated), and the service would never connect again.
		nats.IgnoreAuthErrorAbort(),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(8 << 20),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
			watch(c)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			// Permission violations and slow consumers arrive here; a denied
			// operation is logged at once with the subject the server names,
			// and a repeated one (a denied publish every tick) once a minute
			// with how many were not logged (LogLimit).
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			if ok, suppressed := errs.Allow(err.Error() + "\x00" + subj); ok {
				log.Error("nats error", "err", err, "subscription", subj, "repeats_not_logged", suppressed)
			}
		}),
		// A server that cannot be reached (a wrong DUET_NATS_URL, TLS on
		// one side only, the server down) fails every attempt: logged the
		// first time and then once a minute per error, so that a service
		// that never connects says why instead of retrying silently.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { attemptFailed(err) }),
		nats.ConnectHandler(func(c *nats.Conn) { // the first connection, at once or after failed attempts
			log.Info("nats connected", "url", c.ConnectedUrlRedacted())
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "url", c.ConnectedUrlRedacted())
			if onReconnect != nil {
				onReconnect()
			}
		}),
	}
	nc, err := nats.Connect(url, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("nats connect %s: %w", RedactURL(url), err)
	}
	if !nc.IsConnected() { // retrying the first connection (RetryOnFailedConnect)
		watch(nc)
	}
	return nc, nil
}

// WaitConnected returns once nc is connected, ctx's error if ctx ends first,
// or nats.ErrConnectionClosed if nc is closed meanwhile. A connection made
// by Connect may still be trying its first server (RetryOnFailedConnect):
// until it has connected, what the server tells (its max_payload) is not
// known.
func WaitConnected(ctx context.Context, nc *nats.Conn) error {
	ch := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(ch)
	for {
		switch {
		case nc.IsConnected():
			return nil
		case nc.IsClosed():
			return nats.ErrConnectionClosed
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// reconnectWatch is how often watchReconnect reads the connection's last
// error (a variable for the tests).
var reconnectWatch = time.Second

// attemptKey is a failed attempt's error as the log's rate limit keys it:
// a network error without its addresses, whose local port changes with
// every attempt (each would be logged).
func attemptKey(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Op + ": " + op.Err.Error()
	}
	return err.Error()
}

// watchReconnect passes the last error of c to failed, every interval,
// while c reconnects (failed rate-limits the log). nats.go reports an
// attempt that fails when it dials (ReconnectErrHandler), but not one that
// fails after: TLS wanted on one side only, a certificate the other side
// does not trust, a login refused on the first connection. Such a service
// logged its first failure and then retried silently for good.
func watchReconnect(c *nats.Conn, every time.Duration, failed func(error)) {
	for {
		time.Sleep(every)
		if !c.IsReconnecting() {
			return // connected, or closed
		}
		if err := c.LastError(); err != nil {
			failed(err)
		}
	}
}

// CountAsyncErrors is a Connect option: count is called with each error
// the server or the client reports asynchronously (a denied publish or
// subscription, a slow consumer), besides Connect's log of it. A denied
// publish fails nowhere else: Publish itself returns nil.
func CountAsyncErrors(count func(error)) nats.Option {
	return func(o *nats.Options) error {
		prev := o.AsyncErrorCB
		o.AsyncErrorCB = func(c *nats.Conn, s *nats.Subscription, err error) {
			count(err)
			if prev != nil {
				prev(c, s, err)
			}
		}
		return nil
	}
}

// RedactURL is a NATS server URL list (comma-separated) fit to log: the
// user information of each URL, a user and password or a token, is
// replaced by "redacted". A part that does not parse is replaced whole.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		// nats.go reads a URL without a scheme as nats://.
		bare := !strings.Contains(p, "://")
		if bare {
			p = "nats://" + p
		}
		u, err := url.Parse(p)
		switch {
		case err != nil:
			parts[i] = "(unparsable URL)"
			continue
		case u.User != nil:
			u.User = url.User("redacted")
			p = u.String()
		}
		if bare {
			p = strings.TrimPrefix(p, "nats://")
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

// OfflineQueue describes a loop's offline queue.
type OfflineQueue struct {
	Loop    string
	MaxMsgs int64 // backpressure: publishes beyond this fail (DiscardNew)
}

// ErrOldQueue: the loop's offline queue was made by an earlier duet version
// in a way this one cannot update in place.
var ErrOldQueue = errors.New("bus: offline queue from an earlier version")

// EnsureOfflineQueue creates (or updates) the loop's stream and both parties'
// durable pull consumers. It must run before any dealer publishes: the
// stream has Interest retention, so an item is kept until both consumers
// have acknowledged it and one published with no consumer would be lost.
//
// Never reuse: the consumers acknowledge on delivery (AckNone), so the server
// never redelivers an item, and each party also keeps a high-water mark.
//
// Exact pairing: each stream message holds both parties' shares of one item,
// so the stream sequence pairs the shares by construction; each party reads
// the stream in order through its own consumer.
func EnsureOfflineQueue(ctx context.Context, js jetstream.JetStream, q OfflineQueue, replicas int, file bool) (jetstream.Stream, error) {
	storage := jetstream.MemoryStorage
	if file {
		storage = jetstream.FileStorage
	}
	if replicas < 1 {
		replicas = 1
	}
	cfg := jetstream.StreamConfig{
		Name:      OfflineStream(q.Loop),
		Subjects:  []string{OfflineSubject(q.Loop)},
		Retention: jetstream.InterestPolicy,
		Discard:   jetstream.DiscardNew,
		MaxMsgs:   q.MaxMsgs,
		Storage:   storage,
		Replicas:  replicas,
	}
	st, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("offline stream %s: %w", cfg.Name, err)
	}
	for i := 0; i < 2; i++ {
		// A consumer's ack policy cannot be changed in place; one made by
		// an earlier duet (explicit acks) is named, with the remedy, rather
		// than left to the server's bare "ack policy can not be updated".
		// It is not recreated here: a new consumer would deliver again the
		// items the old one had handed out but not acknowledged.
		if old, err := st.Consumer(ctx, ConsumerName(i)); err == nil && old.CachedInfo().Config.AckPolicy != jetstream.AckNonePolicy {
			return nil, fmt.Errorf("%w: consumer %s/%s acknowledges explicitly (made by an earlier duet version); this version's consumers acknowledge on delivery and the policy cannot be changed in place: delete the stream (nats stream rm %s) and run the sensor's set-up again",
				ErrOldQueue, cfg.Name, ConsumerName(i), cfg.Name)
		}
		_, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: ConsumerName(i),
			// Delivery is the acknowledgement: an item handed to a party is
			// consumed whatever happens next, so it can never be delivered
			// twice, and a crashed party's prefetched items are simply
			// burnt (the parties resynchronize past them).
			AckPolicy:     jetstream.AckNonePolicy,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return nil, fmt.Errorf("offline consumer %s/%s: %w", cfg.Name, ConsumerName(i), err)
		}
	}
	return st, nil
}

// StreamCreated is when the stream name was created, which tells a stream
// deleted and created again under the same name from the one seen before
// (jetstream.ErrStreamNotFound: none now).
func StreamCreated(ctx context.Context, js jetstream.JetStream, name string) (time.Time, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return time.Time{}, err
	}
	return st.CachedInfo().Created, nil
}

// EnsureSetupBucket creates the set-up KV bucket if needed.
func EnsureSetupBucket(ctx context.Context, js jetstream.JetStream, replicas int, file bool) (jetstream.KeyValue, error) {
	storage := jetstream.MemoryStorage
	if file {
		storage = jetstream.FileStorage
	}
	if replicas < 1 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: SetupBucket, History: 1, Storage: storage, Replicas: replicas})
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", SetupBucket, err)
	}
	return kv, nil
}

// WarnReplicaChange logs a warning if the KV bucket exists with another
// replica count than replicas, the one configured (variable names its
// setting): opening it with CreateOrUpdateKeyValue, as the sensor and the
// parties do, then changes the replicas of the bucket every process that
// shares it uses. The change is still made (an operator may mean it); a
// process started with another value by mistake is named in the log
// instead of changing the bucket silently. A bucket not there yet, or a
// server that does not answer, is left to the create.
func WarnReplicaChange(ctx context.Context, js jetstream.JetStream, log *slog.Logger, bucket string, replicas int, variable string) {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return
	}
	if have := max(1, st.CachedInfo().Config.Replicas); have != max(1, replicas) {
		log.Warn("the bucket has another replica count than configured: changing it to the configured one, for every process that shares the bucket; set the variable alike on all",
			"bucket", bucket, "replicas", have, "configured", max(1, replicas), "variable", variable)
	}
}

// WaitSetupBucket waits until the bucket exists (created by the sensor).
// Errors other than its absence (JetStream not enabled, not permitted, not
// answering) are retried too, and logged with log (if not nil) once a
// minute, so that a service that cannot start says why.
func WaitSetupBucket(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (jetstream.KeyValue, error) {
	logs := NewLogLimit()
	for {
		kv, err := js.KeyValue(ctx, SetupBucket)
		if err == nil {
			return kv, nil
		}
		if log != nil && ctx.Err() == nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			if ok, _ := logs.Allow(""); ok { // whatever the error: once a minute
				log.Warn("waiting for the set-up bucket", "bucket", SetupBucket, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitSetupRecord reads the set-up record key from kv until apply takes
// it, every 100 ms, and returns nil once it has (ctx's error if ctx ends
// first). A record apply refuses is reported to refused (to count it and
// log it) once per revision, not at every read: before, a record that does
// not open (keys made anew, another wire version) was refused, counted and
// logged ten times a second. A read that fails for another reason than the
// record not being there yet is logged with log, the first time and then
// once a minute (before, not at all).
func WaitSetupRecord(ctx context.Context, kv jetstream.KeyValue, key string, log *slog.Logger, apply func([]byte) error, refused func(rev uint64, err error)) error {
	var last uint64
	logs := NewLogLimit()
	for {
		e, err := kv.Get(ctx, key)
		switch {
		case err == nil && e.Revision() != last:
			aerr := apply(e.Value())
			if aerr == nil {
				return nil
			}
			last = e.Revision()
			refused(last, aerr)
		case err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && ctx.Err() == nil:
			if ok, notLogged := logs.Allow(err.Error()); ok {
				log.Warn("reading the set-up record", "key", key, "err", err, "repeats_not_logged", notLogged)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LogLimit decides which of a service's repeated warnings, or a
// connection's asynchronous errors, are logged (a plant that stops
// answering fails every tick's read; the server sends the same denied
// publish on every tick, a slow consumer under load): each key the first
// time, then at most once in errorLogEvery, with how many were not logged
// since. The zero value is not usable: NewLogLimit. A nil LogLimit logs
// everything.
type LogLimit struct {
	mu    sync.Mutex
	last  map[string]errorLogEntry
	every time.Duration // errorLogEvery when made
}

// NewLogLimit returns an empty LogLimit.
func NewLogLimit() *LogLimit {
	return &LogLimit{last: map[string]errorLogEntry{}, every: errorLogEvery}
}

// Allow reports whether the warning keyed key is to be logged now, and how
// many of it were not logged since it last was.
func (l *LogLimit) Allow(key string) (ok bool, notLogged int) {
	if l == nil {
		return true, 0
	}
	return l.allow(key, time.Now())
}

// errorLogEvery is LogLimit's interval.
var errorLogEvery = time.Minute

type errorLogEntry struct {
	at         time.Time // last logged
	suppressed int       // since then, not logged
}

// maxErrorKeys bounds the distinct keys remembered; past it the memory
// starts over (and each is logged once more).
const maxErrorKeys = 1024

// allow reports whether the error keyed key, seen at now, is to be logged,
// and how many of it were not logged since it last was.
func (l *LogLimit) allow(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, seen := l.last[key]
	if seen && now.Sub(e.at) < l.every {
		e.suppressed++
		l.last[key] = e
		return false, 0
	}
	if !seen && len(l.last) >= maxErrorKeys {
		clear(l.last)
	}
	l.last[key] = errorLogEntry{at: now}
	return true, e.suppressed
}
