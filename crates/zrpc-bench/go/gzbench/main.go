// gzbench is the go-zero half of zrpc-bench: a go-zero zRPC greeter server whose handler can
// sleep, burn CPU or fail for a while, and a load generator built on go-zero's zRPC client
// (p2c_ewma, breaker, timeout). The load generator takes the flags of `zrpc-bench load` and
// prints the same JSON summary, so that the harness treats the Rust and Go sides alike.
//
//	gzbench serve -listen 127.0.0.1:P [-delay-ms 0] [-spin-us 0] [-fail-ms 0] [-cpu-threshold 0]
//	              [-slots 0 -slot-ms 10] [-etcd h1,h2 -key k] [-events file]
//	gzbench load  -endpoints a,b | -etcd h -key k  [-c 1] [-n 1000] [-duration-ms 0] [-rate 0]
//	              [-warmup 0] [-timeout-ms 0] [-records file] [-wait-ms 10000] [-watch file]
//	gzbench scale -n N [-etcd h -key k -warm-key k10] [-updates 0] [-churn-secs 0 -rate 200]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zeromicro/go-zero/core/conf"
	"github.com/zeromicro/go-zero/core/logx"
	"github.com/zeromicro/go-zero/zrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"zrpc-interop/gozero/greeter"
)

const dropped = 114 // the harness's code for "refused by the client's breaker"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gzbench serve|load|scale [flags]")
		os.Exit(2)
	}
	logx.DisableStat()
	logx.SetLevel(logx.ErrorLevel)
	logx.SetWriter(logx.NewWriter(os.Stderr))
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2:])
	case "load":
		load(os.Args[2:])
	case "scale":
		scale(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "gzbench: unknown command %q (serve, load, scale)\n", os.Args[1])
		os.Exit(2)
	}
}

// ---- server ----

type server struct {
	greeter.UnimplementedGreeterServer
	name        string
	delay, spin time.Duration
	fail        time.Duration
	// places of a downstream resource (nil: none), each held hold per call
	places      chan struct{}
	hold        time.Duration
	started     time.Time
	first       atomic.Int64 // unix ns of the first call
	calls       atomic.Int64
	failedPhase atomic.Int64
	events      *os.File
}

func (s *server) event(v map[string]any) {
	b, _ := json.Marshal(v)
	s.events.Write(append(b, '\n'))
}

func (s *server) SayHello(ctx context.Context, in *greeter.HelloRequest) (*greeter.HelloReply, error) {
	s.calls.Add(1)
	now := time.Now()
	if s.first.CompareAndSwap(0, now.UnixNano()) {
		s.event(map[string]any{"event": "first_call", "ms_since_start": float64(now.Sub(s.started).Microseconds()) / 1000, "unix_ms": float64(now.UnixMicro()) / 1000})
	}
	if s.fail > 0 && now.Sub(time.Unix(0, s.first.Load())) < s.fail {
		s.failedPhase.Add(1)
		return nil, status.Error(codes.Internal, "failing on purpose (bench backend is down)")
	}
	if s.spin > 0 {
		t := time.Now()
		x := uint64(1)
		for time.Since(t) < s.spin {
			x = x*6364136223846793005 + 1
		}
		_ = x
	}
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if s.places != nil {
		// Bound by the resource, not the CPU: wait for a place (in arrival order: Go queues
		// a channel's blocked senders), hold it, give it back.
		select {
		case s.places <- struct{}{}:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		select {
		case <-time.After(s.hold):
			<-s.places
		case <-ctx.Done():
			<-s.places
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-server", s.name))
	return &greeter.HelloReply{Message: "hello " + in.GetName()}, nil
}

func serve(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen address (a fixed port: it is what etcd publishes)")
	delayMs := fs.Int("delay-ms", 0, "sleep per call, ms")
	spinUs := fs.Int("spin-us", 0, "CPU burnt per call, µs")
	failMs := fs.Int("fail-ms", 0, "fail with Internal for this long after the first call, ms")
	slots := fs.Int("slots", 0, "places of a downstream resource each call waits for (0: none)")
	slotMs := fs.Int("slot-ms", 10, "how long a call holds its place, ms")
	cpuThreshold := fs.Int("cpu-threshold", 0, "go-zero CpuThreshold (900 = go-zero's default shedding; 0 = off)")
	etcd := fs.String("etcd", "", "etcd hosts, comma-separated (register there under -key)")
	key := fs.String("key", "", "etcd key")
	events := fs.String("events", "", "append JSON events here (default stdout)")
	profile := fs.String("profile", "quiet", "quiet (Level error, request content not logged) or shipped (go-zero's defaults: every request logged at info)")
	fs.Parse(args)

	if *profile == "shipped" {
		logx.SetLevel(logx.InfoLevel)
	}
	out := os.Stdout
	if *events != "" {
		f, err := os.OpenFile(*events, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gzbench:", err)
			os.Exit(2)
		}
		out = f
	}
	yaml := fmt.Sprintf("Name: gzbench.rpc\nListenOn: %s\nCpuThreshold: %d\n", *listen, *cpuThreshold)
	if *profile == "shipped" {
		yaml += "Log: {Mode: console, Level: info}\n"
	} else {
		yaml += "Log: {Mode: console, Level: error, Stat: false}\n" +
			"Middlewares:\n  StatConf:\n    IgnoreContentMethods: [/greeter.Greeter/SayHello]\n"
	}
	if *etcd != "" {
		yaml += fmt.Sprintf("Etcd: {Hosts: [%s], Key: %s}\n", *etcd, *key)
	}
	var c zrpc.RpcServerConf
	if err := conf.LoadFromYamlBytes([]byte(yaml), &c); err != nil {
		fmt.Fprintln(os.Stderr, "gzbench: config:", err)
		os.Exit(2)
	}
	srv := &server{name: *listen, delay: time.Duration(*delayMs) * time.Millisecond,
		spin: time.Duration(*spinUs) * time.Microsecond, fail: time.Duration(*failMs) * time.Millisecond,
		started: time.Now(), events: out, hold: time.Duration(*slotMs) * time.Millisecond}
	if *slots > 0 {
		srv.places = make(chan struct{}, *slots)
	}
	s := zrpc.MustNewServer(c, func(g *grpc.Server) { greeter.RegisterGreeterServer(g, srv) })
	defer s.Stop()
	srv.event(map[string]any{"event": "ready", "addr": *listen, "unix_ms": float64(time.Now().UnixMicro()) / 1000})
	s.Start()
	srv.event(map[string]any{"event": "stopped", "calls": srv.calls.Load(), "failed_phase_calls": srv.failedPhase.Load()})
}

// ---- load generator ----

type rec struct {
	start, latency time.Duration
	code           int
	server         string
}

type summary struct {
	Calls     int64            `json:"calls"`
	OK        int64            `json:"ok"`
	Failed    int64            `json:"failed"`
	Dropped   int64            `json:"dropped"`
	Codes     map[string]int64 `json:"codes"`
	Servers   map[string]int64 `json:"servers"`
	P50Ms     float64          `json:"p50_ms"`
	P99Ms     float64          `json:"p99_ms"`
	P999Ms    float64          `json:"p999_ms"`
	ElapsedMs float64          `json:"elapsed_ms"`
	CPUUs     float64          `json:"cpu_us"`
	RSSMb     float64          `json:"rss_mb"`
	T0UnixMs  float64          `json:"t0_unix_ms"`
}

func call(cli greeter.GreeterClient, timeout time.Duration) (int, string) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var header metadata.MD
	_, err := cli.SayHello(ctx, &greeter.HelloRequest{Name: "bench"}, grpc.Header(&header))
	if watch != nil {
		watch.done(err)
	}
	if err != nil {
		if strings.Contains(err.Error(), "circuit breaker is open") {
			return dropped, ""
		}
		return int(status.Code(err)), ""
	}
	srv := ""
	if v := header.Get("x-server"); len(v) > 0 {
		srv = v[0]
	}
	return 0, srv
}

func cpuNs() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func load(args []string) {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	fs.String("client", "gozero", "ignored (always go-zero's zrpc client)")
	fs.String("balancer", "p2c_ewma", "ignored (go-zero's client is p2c_ewma)")
	endpoints := fs.String("endpoints", "", "server addresses, comma-separated")
	etcd := fs.String("etcd", "", "etcd hosts, comma-separated")
	key := fs.String("key", "", "etcd key")
	conc := fs.Int("c", 1, "closed loop: workers")
	n := fs.Int64("n", 1000, "closed loop: calls")
	durationMs := fs.Int("duration-ms", 0, "run this long, ms")
	rate := fs.Float64("rate", 0, "open loop: calls per second")
	warmup := fs.Int64("warmup", 0, "calls before measuring")
	timeoutMs := fs.Int("timeout-ms", 0, "client Timeout, ms (0: go-zero's default 2000)")
	records := fs.String("records", "", "write every call here")
	fs.Int("threads", 0, "ignored (GOMAXPROCS decides)")
	waitMs := fs.Int("wait-ms", 10000, "retry the first call until it succeeds or this passes")
	watchPath := fs.String("watch", "", "log the resolver's address lists, failed calls and call counts here")
	fs.Parse(args)

	yaml := "NonBlock: true\n"
	if *timeoutMs > 0 {
		yaml += fmt.Sprintf("Timeout: %d\n", *timeoutMs)
	}
	if *etcd != "" {
		yaml += fmt.Sprintf("Etcd: {Hosts: [%s], Key: %s}\n", *etcd, *key)
	} else {
		yaml += fmt.Sprintf("Endpoints: [%s]\n", *endpoints)
	}
	var c zrpc.RpcClientConf
	if err := conf.LoadFromYamlBytes([]byte(yaml), &c); err != nil {
		fmt.Fprintln(os.Stderr, "gzbench: config:", err)
		os.Exit(2)
	}
	var opts []zrpc.ClientOption
	if *watchPath != "" {
		w, err := newWatchLog(*watchPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gzbench:", err)
			os.Exit(2)
		}
		watch = w
		if base := resolver.Get("etcd"); base != nil {
			opts = append(opts, zrpc.WithDialOption(grpc.WithResolvers(viewBuilder{base})))
		}
		go w.tick()
	}
	cli := greeter.NewGreeterClient(zrpc.MustNewClient(c, opts...).Conn())

	deadline := time.Now().Add(time.Duration(*waitMs) * time.Millisecond)
	for {
		code, _ := call(cli, 0)
		if code == 0 || code == int(codes.Internal) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if *warmup > 0 {
		closed(cli, *conc, *warmup, 0, 0, time.Now())
	}
	cpu0 := cpuNs()
	t0 := time.Now()
	dur := time.Duration(*durationMs) * time.Millisecond
	var recs []rec
	if *rate > 0 {
		if dur == 0 {
			dur = 5 * time.Second
		}
		recs = open(cli, *rate, dur, 0, t0)
	} else {
		recs = closed(cli, *conc, *n, dur, 0, t0)
	}
	elapsed := time.Since(t0)
	cpu := cpuNs() - cpu0

	if *records != "" {
		f, err := os.Create(*records)
		if err == nil {
			var b strings.Builder
			for _, r := range recs {
				srv := r.server
				if srv == "" {
					srv = "-"
				}
				fmt.Fprintf(&b, "%.3f %.3f %d %s\n", ms(r.start), ms(r.latency), r.code, srv)
			}
			f.WriteString(b.String())
			f.Close()
		}
	}
	s := summary{Codes: map[string]int64{}, Servers: map[string]int64{}}
	lat := make([]float64, 0, len(recs))
	for _, r := range recs {
		s.Calls++
		if r.code == 0 {
			s.OK++
		} else {
			s.Failed++
		}
		if r.code == dropped {
			s.Dropped++
			s.Codes["Dropped"]++
		} else {
			s.Codes[codeName(r.code)]++
		}
		if r.server != "" {
			s.Servers[r.server]++
		}
		lat = append(lat, ms(r.latency))
	}
	sort.Float64s(lat)
	s.P50Ms, s.P99Ms, s.P999Ms = pct(lat, 0.5), pct(lat, 0.99), pct(lat, 0.999)
	s.ElapsedMs = ms(elapsed)
	if s.Calls > 0 {
		s.CPUUs = float64(cpu) / 1000 / float64(s.Calls)
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s.RSSMb = float64(ru.Maxrss) / 1024
	s.T0UnixMs = float64(t0.UnixNano()) / 1e6
	b, _ := json.Marshal(s)
	fmt.Println(string(b))
}

// codeName spells codes as tonic's Debug does (the Rust generator's names).
func codeName(c int) string {
	names := []string{"Ok", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
		"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
		"OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}
	if c >= 0 && c < len(names) {
		return names[c]
	}
	return fmt.Sprintf("Code(%d)", c)
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func pct(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}

func closed(cli greeter.GreeterClient, workers int, calls int64, dur, timeout time.Duration, t0 time.Time) []rec {
	workers = max(workers, 1)
	per := (calls + int64(workers) - 1) / int64(workers)
	end := t0.Add(dur)
	var mu sync.Mutex
	var all []rec
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out []rec
			for i := int64(0); ; i++ {
				if dur > 0 && !time.Now().Before(end) || dur == 0 && i >= per {
					break
				}
				start := time.Now()
				code, srv := call(cli, timeout)
				out = append(out, rec{start.Sub(t0), time.Since(start), code, srv})
			}
			mu.Lock()
			all = append(all, out...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all
}

func open(cli greeter.GreeterClient, rate float64, dur, timeout time.Duration, t0 time.Time) []rec {
	period := time.Duration(float64(time.Second) / rate)
	total := int64(math.Round(rate * dur.Seconds()))
	var mu sync.Mutex
	all := make([]rec, 0, total)
	var wg sync.WaitGroup
	for i := int64(0); i < total; i++ {
		// Scheduled send times (open loop): never wait for answers.
		if d := time.Until(t0.Add(time.Duration(i) * period)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			code, srv := call(cli, timeout)
			r := rec{start.Sub(t0), time.Since(start), code, srv}
			mu.Lock()
			all = append(all, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all
}

// ---- -watch: what the fleet run reads ----

// watchLog appends lines to the -watch file, each written at once (the harness may SIGKILL the
// generator and reads the file as it grows):
//
//	view <unix_ms> <addr,addr,...>   the addresses go-zero's etcd resolver handed to grpc
//	fail <unix_ms> <code> <message>  a failed call
//	count <unix_ms> <calls> <failed> calls completed so far, every second
type watchLog struct {
	mu            sync.Mutex
	f             *os.File
	calls, failed atomic.Int64
}

var watch *watchLog

func newWatchLog(path string) (*watchLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &watchLog{f: f}, nil
}

func (w *watchLog) line(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.f.WriteString(s)
}

func unixMs() float64 { return float64(time.Now().UnixNano()) / 1e6 }

func (w *watchLog) done(err error) {
	w.calls.Add(1)
	if err == nil {
		return
	}
	w.failed.Add(1)
	msg := strings.ReplaceAll(status.Convert(err).Message(), "\n", " ")
	w.line(fmt.Sprintf("fail %.3f %s %s\n", unixMs(), codeName(int(status.Code(err))), msg))
}

func (w *watchLog) tick() {
	for range time.Tick(time.Second) {
		w.line(fmt.Sprintf("count %.3f %d %d\n", unixMs(), w.calls.Load(), w.failed.Load()))
	}
}

// viewBuilder wraps go-zero's etcd resolver: every address list it hands to grpc is logged.
type viewBuilder struct{ base resolver.Builder }

func (b viewBuilder) Build(t resolver.Target, cc resolver.ClientConn, o resolver.BuildOptions) (resolver.Resolver, error) {
	return b.base.Build(t, viewConn{cc}, o)
}

func (b viewBuilder) Scheme() string { return b.base.Scheme() }

type viewConn struct{ resolver.ClientConn }

func (c viewConn) UpdateState(s resolver.State) error {
	addrs := make([]string, 0, len(s.Addresses))
	for _, a := range s.Addresses {
		addrs = append(addrs, a.Addr)
	}
	watch.line(fmt.Sprintf("view %.3f %s\n", unixMs(), strings.Join(addrs, ",")))
	return c.ClientConn.UpdateState(s)
}
