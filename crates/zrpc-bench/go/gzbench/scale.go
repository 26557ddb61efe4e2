package main

// gzbench scale: the go-zero half of `zrpc-bench scale`. One go-zero zRPC client whose target
// lists N endpoints, in a process of its own; the flags and JSON lines are those of
// `zrpc-bench scale-client`:
//   - {"rss0_kib", "rss1_kib", "held", "load_ms", "picker_ms", "dialed", "dials"} once the
//     client's balancer holds its set;
//   - with -etcd and -updates, {"updates": [...], "rss2_kib"}: each a DELETE or PUT of a key whose
//     address the balancer holds, timed from just before the etcd request;
//   - with -churn-secs, the churn summary.
//
// What is timed: go-zero's resolver handing its address list to grpc ("published") and grpc
// handing that list to go-zero's p2c_ewma balancer, after the balancer applied it ("applied").
// Both are caught by wrapping the registered builders (grpc's public resolver and balancer
// APIs); the code they wrap is go-zero's, unchanged. go-zero's resolver hands grpc a random
// subset of 32 of the N on every change.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeromicro/go-zero/core/conf"
	"github.com/zeromicro/go-zero/core/discov"
	"github.com/zeromicro/go-zero/core/logx"
	"github.com/zeromicro/go-zero/zrpc"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"zrpc-interop/gozero/greeter"
)

const basePort = 20000 // scale_client.rs BASE_PORT

func scaleAddr(i int) string { return fmt.Sprintf("127.0.0.1:%d", basePort+i) }

// an address list handed on, and when
type update struct {
	at    time.Time
	addrs map[string]bool
}

type updates struct {
	mu sync.Mutex
	// every update (kept while timing single changes; off for the churn, whose thousands of
	// lists would be this program's memory, not go-zero's)
	keep bool
	all  []update
	n    int
	lst  map[string]bool
}

func (u *updates) add(addrs []resolver.Address) {
	m := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		m[a.Addr] = true
	}
	u.mu.Lock()
	u.n++
	u.lst = m
	if u.keep {
		u.all = append(u.all, update{time.Now(), m})
	}
	u.mu.Unlock()
}

func (u *updates) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n
}

func (u *updates) last() map[string]bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lst
}

// first waits up to limit for an update after the first `from` that satisfies ok; its time.
func (u *updates) first(from int, limit time.Duration, ok func(map[string]bool) bool) (time.Time, bool) {
	deadline := time.Now().Add(limit)
	for {
		u.mu.Lock()
		for _, e := range u.all[min(from, len(u.all)):] {
			if ok(e.addrs) {
				u.mu.Unlock()
				return e.at, true
			}
		}
		u.mu.Unlock()
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(100 * time.Microsecond)
	}
}

var published, applied = updates{keep: true}, updates{keep: true}

// time spent inside grpc's handling of the resolver's lists (the balancer applying them), ns
var inUpdate atomic.Int64

type stampResolver struct{ base resolver.Builder }

func (b stampResolver) Build(t resolver.Target, cc resolver.ClientConn, o resolver.BuildOptions) (resolver.Resolver, error) {
	return b.base.Build(t, stampConn{cc}, o)
}

func (b stampResolver) Scheme() string { return b.base.Scheme() }

type stampConn struct{ resolver.ClientConn }

func (c stampConn) UpdateState(s resolver.State) error {
	published.add(s.Addresses)
	t := time.Now()
	err := c.ClientConn.UpdateState(s)
	inUpdate.Add(int64(time.Since(t)))
	return err
}

type stampBuilder struct{ balancer.Builder }

func (b stampBuilder) Build(cc balancer.ClientConn, o balancer.BuildOptions) balancer.Balancer {
	return stampBalancer{b.Builder.Build(cc, o)}
}

type stampBalancer struct{ balancer.Balancer }

func (b stampBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	err := b.Balancer.UpdateClientConnState(s)
	applied.add(s.ResolverState.Addresses)
	return err
}

// dials counts the connections grpc tries to open, and to how many addresses.
type dials struct {
	mu    sync.Mutex
	addrs map[string]int
}

func (d *dials) dial(ctx context.Context, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addrs[addr]++
	d.mu.Unlock()
	return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
}

func (d *dials) counts() (addrs, attempts int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.addrs {
		attempts += n
	}
	return len(d.addrs), attempts
}

func rssKib() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}

// settledRssKib: RSS once it stopped moving (three readings 100 ms apart within 8 KiB), as
// scale-client reads it.
func settledRssKib() float64 {
	last, same := rssKib(), 0
	for i := 0; i < 50 && same < 3; i++ {
		time.Sleep(100 * time.Millisecond)
		now := rssKib()
		if d := now - last; d <= 8 && d >= -8 {
			same++
		} else {
			same = 0
		}
		last = now
	}
	return last
}

func sockets() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	seen := map[string]bool{}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			seen[l] = true
		}
	}
	return len(seen)
}

func emit(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gzbench scale:", err)
	os.Exit(2)
}

type scaleArgs struct {
	n, updates         int
	etcd, key, warmKey string
	churnSecs          int
	rate               float64
	d                  *dials
	direct, etcdR      resolver.Builder
}

// newClient builds a go-zero client (go-zero's defaults: p2c_ewma, breaker, 2 s timeout,
// non-blocking dial) on key, or on the first n addresses when there is no etcd.
func (a *scaleArgs) newClient(key string, n int) zrpc.Client {
	var c zrpc.RpcClientConf
	yaml := "NonBlock: true\n"
	if a.etcd != "" {
		yaml += fmt.Sprintf("Etcd: {Hosts: [%s], Key: %s}\n", a.etcd, key)
	} else {
		yaml += "Endpoints: [" + scaleAddr(0) + "]\n"
	}
	if err := conf.LoadFromYamlBytes([]byte(yaml), &c); err != nil {
		fail(err)
	}
	if a.etcd == "" {
		c.Endpoints = make([]string, n)
		for i := range c.Endpoints {
			c.Endpoints[i] = scaleAddr(i)
		}
	}
	cli, err := zrpc.NewClient(c,
		zrpc.WithDialOption(grpc.WithResolvers(stampResolver{a.direct}, stampResolver{a.etcdR})),
		zrpc.WithDialOption(grpc.WithContextDialer(a.d.dial)))
	if err != nil {
		fail(err)
	}
	return cli
}

func scale(args []string) {
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	var a scaleArgs
	fs.IntVar(&a.n, "n", 10, "endpoints in the target")
	fs.StringVar(&a.etcd, "etcd", "", "etcd host (discovery of the keys under -key); direct target when empty")
	fs.StringVar(&a.key, "key", "", "etcd key holding the N endpoints")
	fs.StringVar(&a.warmKey, "warm-key", "", "etcd key holding 10 endpoints (the warm-up client)")
	fs.IntVar(&a.updates, "updates", 0, "update pairs (a DELETE, then the PUT that restores the key) to time")
	fs.IntVar(&a.churnSecs, "churn-secs", 0, "churn: seconds of calls (plus one)")
	fs.Float64Var(&a.rate, "rate", 200, "churn: calls per second (open loop)")
	fs.Parse(args)

	// info into a sink: what a service at go-zero's default level pays
	logx.SetLevel(logx.InfoLevel)
	logx.SetWriter(logx.NewWriter(io.Discard))
	a.d = &dials{addrs: map[string]int{}}
	a.direct, a.etcdR = resolver.Get("direct"), resolver.Get("etcd")
	base := balancer.Get("p2c_ewma")
	if a.direct == nil || a.etcdR == nil || base == nil {
		fail(fmt.Errorf("go-zero's direct/etcd resolvers or p2c_ewma balancer are not registered"))
	}
	balancer.Register(stampBuilder{base})

	// A client of 10 endpoints built and closed first: the one-time costs (grpc's and go-zero's
	// globals, the etcd connection go-zero's registry keeps per host list) are not the N's.
	warm := a.newClient(a.warmKey, 10)
	if _, ok := applied.first(0, 10*time.Second, func(m map[string]bool) bool { return len(m) == 10 }); !ok {
		fail(fmt.Errorf("the warm-up client never held its 10 endpoints"))
	}
	warm.Conn().Close()
	var etcd *clientv3.Client
	if a.etcd != "" {
		var err error
		etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{a.etcd}, DialTimeout: 5 * time.Second})
		if err != nil {
			fail(err)
		}
		defer etcd.Close()
		if _, err := etcd.Get(context.Background(), "scale/none"); err != nil {
			fail(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	rss0 := settledRssKib()
	a.d.mu.Lock()
	clear(a.d.addrs)
	a.d.mu.Unlock()

	want := min(a.n, 32)
	from, fromB := published.count(), applied.count()
	started := time.Now()
	cli := a.newClient(a.key, a.n)
	loaded, ok1 := published.first(from, 60*time.Second, func(m map[string]bool) bool { return len(m) == want })
	picked, ok2 := applied.first(fromB, 60*time.Second, func(m map[string]bool) bool { return len(m) == want })
	if !ok1 || !ok2 {
		fail(fmt.Errorf("the client did not hold its %d endpoints within 60 s", want))
	}
	rss1 := settledRssKib()
	dialed, attempts := a.d.counts()
	emit(map[string]any{
		"rss0_kib": rss0, "rss1_kib": rss1, "held": len(applied.last()),
		"load_ms": ms(loaded.Sub(started)), "picker_ms": ms(picked.Sub(started)),
		"dialed": dialed, "dials": attempts,
	})
	if etcd == nil {
		return
	}
	if a.churnSecs > 0 {
		emit(a.churn(cli, etcd))
		return
	}
	ctx := context.Background()
	var ups []map[string]any
	for round := 0; round < a.updates; round++ {
		held := make([]string, 0, 32)
		for k := range applied.last() {
			held = append(held, k)
		}
		sort.Strings(held)
		addr := held[round%len(held)]
		port, _ := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
		key := fmt.Sprintf("%s/%d", a.key, port-basePort)
		for _, put := range []bool{false, true} {
			from, fromB := published.count(), applied.count()
			// a DELETE: the first list without it; a PUT: the next list (a random subset of
			// 32 may leave it out)
			ok := func(m map[string]bool) bool { return put || !m[addr] }
			sent := time.Now()
			var err error
			if put {
				_, err = etcd.Put(ctx, key, addr)
			} else {
				_, err = etcd.Delete(ctx, key)
			}
			if err != nil {
				fail(err)
			}
			acked := time.Now()
			p, okP := published.first(from, 10*time.Second, ok)
			b, okB := applied.first(fromB, 10*time.Second, ok)
			op := "delete"
			if put {
				op = "put"
			}
			u := map[string]any{"op": op, "ack_ms": ms(acked.Sub(sent))}
			if okP {
				u["published_ms"] = ms(p.Sub(sent))
			}
			if okB {
				u["applied_ms"] = ms(b.Sub(sent))
			}
			ups = append(ups, u)
			time.Sleep(20 * time.Millisecond)
		}
	}
	emit(map[string]any{"updates": ups, "rss2_kib": settledRssKib()})
}

// churn calls at -rate for -churn-secs + 1 s while the harness replaces a tenth of the keys
// every second; then go-zero's view of the prefix (a discov.Subscriber, which shares the
// resolver's watch) is compared with a fresh read of it.
func (a *scaleArgs) churn(cli zrpc.Client, etcd *clientv3.Client) map[string]any {
	g := greeter.NewGreeterClient(cli.Conn())
	sub, err := discov.NewSubscriber([]string{a.etcd}, a.key)
	if err != nil {
		fail(err)
	}
	var ok, failed atomic.Int64
	var mu sync.Mutex
	codes := map[string]int64{}
	firstMsg := map[string]string{}
	for _, u := range []*updates{&published, &applied} {
		u.mu.Lock()
		u.keep, u.all = false, nil
		u.mu.Unlock()
	}
	socketsBefore := sockets()
	updates0 := published.count()
	inUpdate.Store(0)
	cpu0 := cpuNs()
	started := time.Now()
	dur := time.Duration(a.churnSecs+1) * time.Second
	period := time.Duration(float64(time.Second) / max(a.rate, 1))
	rss := []float64{rssKib()}
	sampled := started
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		at := started.Add(time.Duration(i) * period)
		if at.Sub(started) >= dur {
			break
		}
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := g.SayHello(context.Background(), &greeter.HelloRequest{Name: "churn"})
			if err == nil {
				ok.Add(1)
				return
			}
			failed.Add(1)
			c := codeName(int(status.Code(err)))
			if strings.Contains(err.Error(), "circuit breaker is open") {
				c = "Dropped"
			}
			mu.Lock()
			if _, seen := firstMsg[c]; !seen {
				m := strings.SplitN(err.Error(), "\n", 2)[0]
				firstMsg[c] = m[:min(len(m), 200)]
			}
			codes[c]++
			mu.Unlock()
		}()
		if time.Since(sampled) >= 5*time.Second {
			sampled = time.Now()
			rss = append(rss, rssKib())
		}
	}
	wg.Wait()
	secs := time.Since(started).Seconds()
	cpu := float64(cpuNs()-cpu0) / 1e9 / secs
	resp, err := etcd.Get(context.Background(), a.key+"/", clientv3.WithPrefix())
	if err != nil {
		fail(err)
	}
	wantSet := map[string]bool{}
	for _, kv := range resp.Kvs {
		wantSet[string(kv.Value)] = true
	}
	same := func() bool {
		vals := sub.Values()
		if len(vals) != len(wantSet) {
			return false
		}
		for _, v := range vals {
			if !wantSet[v] {
				return false
			}
		}
		return true
	}
	matches := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if matches = same(); matches {
			break
		}
	}
	rssAfter := settledRssKib()
	byCode := map[string]int64{}
	for c, n := range codes {
		byCode[c+": "+firstMsg[c]] = n
	}
	dialed, attempts := a.d.counts()
	return map[string]any{
		"ok": ok.Load(), "failed": failed.Load(), "codes": byCode, "cpu_share": cpu,
		"rss_kib": rss, "rss_after_kib": rssAfter, "set_matches_etcd": matches,
		"etcd_keys": len(wantSet), "held": len(applied.last()),
		"sockets_before": socketsBefore, "sockets_after": sockets(),
		"dialed": dialed, "dials": attempts,
		"resolver_updates": published.count() - updates0,
		"in_update_s":      float64(inUpdate.Load()) / 1e9,
	}
}
