// gz-client calls the greeter through a go-zero zRPC client (etcd discovery, p2c_ewma, go-zero's
// client interceptors) and prints JSON. It is the Go half of zrpc's interop tests.
//
//	gz-client -f etc/gz-client.yaml [-n 10] [-c 1] [-gap 0] [-duration 0] [-wait 10s]
//	          [-stream 0] [-name world] [-authority ""] [-call-timeout 0] [-gzip] [-v]
//	          [-tls-ca ca.pem [-tls-cert c.pem -tls-key c.key] [-tls-server-name n]]
//	          [-hash-keys N [-hash-peers M]] [-baggage k=v,...]
//
// With -baggage every call's context carries that W3C baggage (go.opentelemetry.io/otel/baggage),
// which go-zero's client interceptor sends as the `baggage` metadata.
//
// With -hash-keys N (for a client with BalancerName: consistent_hash) it makes one call per key
// key-0 .. key-<N-1>, each with zrpc.SetHashKey, and adds "key" to the -v lines. -hash-peers M
// first calls with keys warm-0, warm-1, ... (uncounted) until M distinct servers answered:
// go-zero's ring holds only the connections that are READY, so keys sent before every server's
// connection is up would go elsewhere.
//
// With -tls-ca it dials over TLS through go-zero's own option, zrpc.WithTransportCredentials
// (grpc-go's credentials.NewTLS), trusting only that CA; -tls-cert/-tls-key add a client
// certificate (mutual TLS). Without -tls-server-name grpc-go checks the server certificate
// against the host of the dial target's authority: for Endpoints of one server that is the
// server's host, for etcd discovery it is the etcd host (not the server's), for two or more
// hosts it is the whole authority "h1:p1,h2:p2" (it does not split into host and port), which
// no certificate names and rustls refuses as SNI.
//
// With -gzip every call is sent compressed with gzip (grpc.UseCompressor(gzip.Name)); grpc-go
// then also asks for a gzip response.
//
// With -v it prints one line per call:
//
//	{"call":i,"peer":"127.0.0.1:P","server":"<x-server>","code":"OK","message":"<reply or status message>"}
//
// and at the end always one summary line:
//
//	{"calls":N,"ok":K,"failed":F,"codes":{"OK":K,...},"peers":{...},"servers":{...},
//	 "first_errors":[...],"p50_ms":f,"p99_ms":f,"elapsed_ms":f}
//
// It exits 1 if any counted call failed. The first call is retried (not counted) until it reaches a
// server or -wait elapses, because discovery and start-up lag.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeromicro/go-zero/core/conf"
	"github.com/zeromicro/go-zero/core/logx"
	"github.com/zeromicro/go-zero/core/service"
	"github.com/zeromicro/go-zero/core/trace"
	"github.com/zeromicro/go-zero/zrpc"
	"go.opentelemetry.io/otel/baggage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"zrpc-interop/gozero/greeter"
)

const serverHeader = "x-server"

// Config is the client config: ServiceConf (Name, Log, ...) as goctl embeds it, plus the
// Greeter client block.
type Config struct {
	service.ServiceConf
	Greeter zrpc.RpcClientConf
}

var (
	configFile  = flag.String("f", "etc/gz-client.yaml", "the config file")
	numCalls    = flag.Int("n", 10, "number of calls (ignored when -duration > 0)")
	concurrency = flag.Int("c", 1, "concurrent workers")
	gap         = flag.Duration("gap", 0, "pause between two calls of one worker")
	duration    = flag.Duration("duration", 0, "if > 0, keep calling until this elapses (ignores -n)")
	wait        = flag.Duration("wait", 10*time.Second, "retry the first call until it reaches a server or this elapses")
	streamCount = flag.Int("stream", 0, "if > 0, call SayHelloStream with count=k; OK only if k messages arrive")
	name        = flag.String("name", "world", "the name to send (may carry a gz-server directive)")
	authority   = flag.String("authority", "", "if set, dial with grpc.WithAuthority(value)")
	verbose     = flag.Bool("v", false, "print one JSON line per call")
	callTimeout = flag.Duration("call-timeout", 0, "extra per-call context timeout (0: none)")
	useGzip     = flag.Bool("gzip", false, "send every call compressed with gzip (grpc.UseCompressor)")
	outgoing    = flag.String("metadata", "", "key=value metadata sent with every call (e.g. zrpc-tier=critical)")

	tlsCA         = flag.String("tls-ca", "", "PEM CA file: dial over TLS, trusting only this CA")
	tlsCert       = flag.String("tls-cert", "", "PEM client certificate for mutual TLS (needs -tls-ca and -tls-key)")
	tlsKey        = flag.String("tls-key", "", "PEM private key of -tls-cert")
	tlsServerName = flag.String("tls-server-name", "", "name the server certificate must carry (default: the target's host)")

	hashKeys  = flag.Int("hash-keys", 0, "if > 0, one call per key key-0 .. key-<n-1> with zrpc.SetHashKey (ignores -n, -duration)")
	hashPeers = flag.Int("hash-peers", 0, "with -hash-keys: first call (uncounted) until this many servers answered")
	bags      = flag.String("baggage", "", "W3C baggage (k=v,...) in every call's context")

	// the parsed -baggage
	callBaggage baggage.Baggage
)

// result is one call's outcome; its JSON form is the -v line.
type result struct {
	Call    int    `json:"call"`
	Key     string `json:"key,omitempty"`
	Peer    string `json:"peer"`
	Server  string `json:"server"`
	Code    string `json:"code"`
	Message string `json:"message"`

	ok      bool
	latency time.Duration
	err     string // the error's first line, for first_errors
}

type summary struct {
	Calls       int            `json:"calls"`
	OK          int            `json:"ok"`
	Failed      int            `json:"failed"`
	Codes       map[string]int `json:"codes"`
	Peers       map[string]int `json:"peers"`
	Servers     map[string]int `json:"servers"`
	FirstErrors []string       `json:"first_errors"`
	P50Ms       float64        `json:"p50_ms"`
	P99Ms       float64        `json:"p99_ms"`
	ElapsedMs   float64        `json:"elapsed_ms"`
}

var outMu sync.Mutex

func printJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintln(os.Stdout, string(b))
}

// call makes one call (unary or streaming) and describes it. reached tells whether the call got a
// transport stream to some server (a peer is known).
func call(cli greeter.GreeterClient, i int, key string) (r result, reached bool) {
	ctx := baggage.ContextWithBaggage(context.Background(), callBaggage)
	if k, v, ok := strings.Cut(*outgoing, "="); ok {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	if key != "" {
		ctx = zrpc.SetHashKey(ctx, key)
		r.Key = key
	}
	if *callTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *callTimeout)
		defer cancel()
	}

	var p peer.Peer
	var header, trailer metadata.MD
	opts := []grpc.CallOption{grpc.Peer(&p), grpc.Header(&header), grpc.Trailer(&trailer)}
	if *useGzip {
		opts = append(opts, grpc.UseCompressor(gzip.Name))
	}

	start := time.Now()
	var err error
	var message string
	if *streamCount > 0 {
		message, err = callStream(ctx, cli, opts)
	} else {
		var reply *greeter.HelloReply
		reply, err = cli.SayHello(ctx, &greeter.HelloRequest{Name: *name}, opts...)
		if err == nil {
			message = reply.GetMessage()
		}
	}
	r.latency = time.Since(start)

	r.Call = i
	if p.Addr != nil {
		r.Peer = p.Addr.String()
		reached = true
	}
	// An error reply is trailers-only: its x-server, if any, arrives with the trailers.
	if v := header.Get(serverHeader); len(v) > 0 {
		r.Server = v[0]
	} else if v := trailer.Get(serverHeader); len(v) > 0 {
		r.Server = v[0]
	}
	if err != nil {
		st := status.Convert(err)
		r.Code = st.Code().String()
		r.Message = st.Message()
		// First line only: a go-zero server's panic message carries a stack trace that differs
		// per goroutine, which would make every panic a "distinct" error.
		r.err, _, _ = strings.Cut(err.Error(), "\n")
		return r, reached
	}
	r.Code = codes.OK.String()
	r.Message = message
	r.ok = true
	return r, reached
}

// callStream calls SayHelloStream with count=-stream and returns the messages joined by ";".
// A stream that ends OK with fewer messages fails with code DataLoss.
func callStream(ctx context.Context, cli greeter.GreeterClient, opts []grpc.CallOption) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	want := *streamCount
	stream, err := cli.SayHelloStream(ctx, &greeter.HelloStreamRequest{Name: *name, Count: uint32(want)}, opts...)
	if err != nil {
		return "", err
	}
	var msgs []string
	for {
		reply, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
		msgs = append(msgs, reply.GetMessage())
	}
	if len(msgs) != want {
		return "", status.Errorf(codes.DataLoss, "stream ended after %d of %d messages", len(msgs), want)
	}
	return strings.Join(msgs, ";"), nil
}

// waitReady waits until conn is READY (discovery found a server and a transport is up) or until
// the deadline passes.
func waitReady(conn *grpc.ClientConn, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			return
		case connectivity.Idle:
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, state) {
			return // deadline
		}
	}
}

// clientTLS is the TLS config of the -tls-* flags, or nil without -tls-ca.
func clientTLS() (*tls.Config, error) {
	if *tlsCA == "" {
		if *tlsCert != "" || *tlsKey != "" || *tlsServerName != "" {
			return nil, errors.New("-tls-cert, -tls-key and -tls-server-name need -tls-ca")
		}
		return nil, nil
	}
	pem, err := os.ReadFile(*tlsCA)
	if err != nil {
		return nil, fmt.Errorf("-tls-ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-tls-ca %s: no PEM certificate in the file", *tlsCA)
	}
	cfg := &tls.Config{RootCAs: roots, ServerName: *tlsServerName, MinVersion: tls.VersionTLS12}
	if (*tlsCert == "") != (*tlsKey == "") {
		return nil, errors.New("-tls-cert and -tls-key go together")
	}
	if *tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert %s / -tls-key %s: %w", *tlsCert, *tlsKey, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// percentile is the nearest-rank percentile of sorted latencies, in ms.
func percentile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return ms(sorted[rank])
}

func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// keyOf is the hash key of call i (none without -hash-keys).
func keyOf(i int) string {
	if *hashKeys <= 0 {
		return ""
	}
	return fmt.Sprintf("key-%d", i)
}

// warmUp calls (uncounted) with keys warm-0, warm-1, ... until -hash-peers distinct servers
// answered or the deadline passes: then go-zero's ring holds all of them.
func warmUp(cli greeter.GreeterClient, deadline time.Time) {
	peers := map[string]bool{}
	for i := 0; len(peers) < *hashPeers && time.Now().Before(deadline); i++ {
		r, _ := call(cli, -1, fmt.Sprintf("warm-%d", i))
		if r.ok {
			peers[r.Peer] = true
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func main() {
	flag.Parse()
	if *bags != "" {
		b, err := baggage.Parse(*bags)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gz-client: -baggage:", err)
			os.Exit(2)
		}
		callBaggage = b
	}
	if *hashKeys > 0 {
		*numCalls = *hashKeys
		*duration = 0
	}

	var c Config
	conf.MustLoad(*configFile, &c)
	// Logs (go-zero's client interceptors log failed and slow calls) go to stderr: stdout is JSON.
	c.MustSetUp()
	if c.Log.Mode == "" || c.Log.Mode == "console" {
		logx.SetWriter(logx.NewWriter(os.Stderr))
	}

	var opts []zrpc.ClientOption
	if *authority != "" {
		opts = append(opts, zrpc.WithDialOption(grpc.WithAuthority(*authority)))
	}
	tlsConf, err := clientTLS()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gz-client:", err)
		os.Exit(2)
	}
	if tlsConf != nil {
		opts = append(opts, zrpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
	}
	conn := zrpc.MustNewClient(c.Greeter, opts...).Conn()
	cli := greeter.NewGreeterClient(conn)

	var (
		mu      sync.Mutex
		results []result
	)
	record := func(r result) {
		if *verbose {
			printJSON(r)
		}
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}

	// The first call: retried, uncounted, until it reaches a server or -wait elapses; the last
	// attempt is call 0. Wait for a READY connection before calling at all: each failed attempt
	// would count against go-zero's client breaker (per method, 10 s window) and make later,
	// counted calls fail with "circuit breaker is open".
	waitUntil := time.Now().Add(*wait)
	waitReady(conn, waitUntil)
	if *hashPeers > 0 {
		warmUp(cli, waitUntil)
	}
	var first result
	var start time.Time
	for {
		start = time.Now()
		r, reached := call(cli, 0, keyOf(0))
		first = r
		if r.ok || reached || !time.Now().Before(waitUntil) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	record(first)

	var next atomic.Int64 // the next call index
	next.Store(1)
	var stopAt time.Time
	if *duration > 0 {
		stopAt = start.Add(*duration)
	}
	take := func() (int, bool) {
		if *duration > 0 {
			if !time.Now().Before(stopAt) {
				return 0, false
			}
			return int(next.Add(1) - 1), true
		}
		i := int(next.Add(1) - 1)
		return i, i < *numCalls
	}

	var wg sync.WaitGroup
	for w := 0; w < max(1, *concurrency); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				if n > 0 && *gap > 0 {
					time.Sleep(*gap)
				}
				i, ok := take()
				if !ok {
					return
				}
				r, _ := call(cli, i, keyOf(i))
				record(r)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	sort.Slice(results, func(a, b int) bool { return results[a].Call < results[b].Call })
	s := summary{
		Calls:       len(results),
		Codes:       map[string]int{},
		Peers:       map[string]int{},
		Servers:     map[string]int{},
		FirstErrors: []string{},
		ElapsedMs:   ms(elapsed),
	}
	latencies := make([]time.Duration, 0, len(results))
	seen := map[string]bool{}
	for _, r := range results {
		latencies = append(latencies, r.latency)
		s.Codes[r.Code]++
		if r.Peer != "" {
			s.Peers[r.Peer]++
		}
		if r.Server != "" {
			s.Servers[r.Server]++
		}
		if r.ok {
			s.OK++
			continue
		}
		s.Failed++
		if !seen[r.err] && len(s.FirstErrors) < 5 {
			seen[r.err] = true
			s.FirstErrors = append(s.FirstErrors, r.err)
		}
	}
	sort.Slice(latencies, func(a, b int) bool { return latencies[a] < latencies[b] })
	s.P50Ms = percentile(latencies, 0.50)
	s.P99Ms = percentile(latencies, 0.99)
	printJSON(s)
	// flush the spans of the calls (Telemetry with an Endpoint), as a go-zero service does at
	// shutdown
	trace.StopAgent()

	if s.Failed > 0 {
		os.Exit(1)
	}
}
