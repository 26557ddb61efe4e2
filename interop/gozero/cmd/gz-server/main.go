// gz-server is a go-zero zRPC greeter server in the shape `goctl rpc new` generates (config,
// svc, server and logic collapsed into one file). It is the Go half of zrpc's interop tests.
//
//	gz-server -f etc/gz-server.yaml [-delay 0s]
//	          [-tls-cert s.pem -tls-key s.key [-tls-client-ca ca.pem]]
//
// With -tls-cert/-tls-key it serves TLS the way a go-zero service does it in code (RpcServerConf
// has no TLS keys): s.AddOptions(grpc.Creds(credentials.NewTLS(...))). -tls-client-ca makes
// it require and verify client certificates signed by that CA (mutual TLS).
//
// SayHello replies "hello <name>", SayHelloStream replies `count` messages "hello <name> <i>"
// with `interval_ms` between them, exactly like zrpc's example greeter. Every response carries
// the response header `x-server: <ListenOn>`.
//
// For parity tests the SayHello name may carry a directive:
//
//	sleep:<ms>  sleep that many ms (context-aware), then reply normally
//	panic       panic in the handler
//	code:<n>    fail with status code n, message "forced <n>"
//	meta        reply with the incoming metadata as sorted "k=v" pairs joined by ";",
//	            plus "deadline=<ms>" (remaining) or "deadline=none"
//
// Stdout carries JSON lines only: {"event":"starting","listen_on":...} before serving and
// {"event":"stopped","calls":N} once the server has stopped (SIGTERM/SIGINT: go-zero's
// graceful shutdown). Logs go to stderr.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/zeromicro/go-zero/core/conf"
	"github.com/zeromicro/go-zero/core/logx"
	"github.com/zeromicro/go-zero/core/service"
	"github.com/zeromicro/go-zero/zrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"zrpc-interop/gozero/greeter"
)

// serverHeader is the response metadata key naming the server that answered.
const serverHeader = "x-server"

var (
	configFile = flag.String("f", "etc/gz-server.yaml", "the config file")
	delay      = flag.Duration("delay", 0, "wait this long before answering each SayHello (context-aware)")

	tlsCert     = flag.String("tls-cert", "", "PEM server certificate chain: serve TLS (needs -tls-key)")
	tlsKey      = flag.String("tls-key", "", "PEM private key of -tls-cert")
	tlsClientCA = flag.String("tls-client-ca", "", "PEM CA file: require client certificates it signed (mutual TLS)")
)

// serverTLS is the TLS config of the -tls-* flags, or nil without -tls-cert.
func serverTLS() (*tls.Config, error) {
	if *tlsCert == "" && *tlsKey == "" {
		if *tlsClientCA != "" {
			return nil, errors.New("-tls-client-ca needs -tls-cert and -tls-key")
		}
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
	if err != nil {
		return nil, fmt.Errorf("-tls-cert %s / -tls-key %s: %w", *tlsCert, *tlsKey, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if *tlsClientCA != "" {
		pem, err := os.ReadFile(*tlsClientCA)
		if err != nil {
			return nil, fmt.Errorf("-tls-client-ca: %w", err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-client-ca %s: no PEM certificate in the file", *tlsClientCA)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// greeterServer implements greeter.GreeterServer.
type greeterServer struct {
	greeter.UnimplementedGreeterServer
	name  string        // the x-server value: c.ListenOn
	delay time.Duration // -delay
	calls atomic.Int64  // handler invocations, unary and streaming
}

func (s *greeterServer) header() metadata.MD {
	return metadata.Pairs(serverHeader, s.name)
}

func (s *greeterServer) SayHello(ctx context.Context, in *greeter.HelloRequest) (*greeter.HelloReply, error) {
	s.calls.Add(1)
	// Set first, so that even an error response carries x-server (in its trailers-only reply).
	if err := grpc.SetHeader(ctx, s.header()); err != nil {
		return nil, err
	}
	if s.delay > 0 {
		if err := sleep(ctx, s.delay); err != nil {
			return nil, err
		}
	}

	name := in.GetName()
	switch {
	case name == "panic":
		panic("gz-server: panic requested")
	case name == "meta":
		return &greeter.HelloReply{Message: describeIncoming(ctx)}, nil
	case strings.HasPrefix(name, "code:"):
		n, err := strconv.Atoi(strings.TrimPrefix(name, "code:"))
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "bad directive %q", name)
		}
		return nil, status.Error(codes.Code(n), fmt.Sprintf("forced %d", n))
	case strings.HasPrefix(name, "sleep:"):
		ms, err := strconv.Atoi(strings.TrimPrefix(name, "sleep:"))
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "bad directive %q", name)
		}
		if err := sleep(ctx, time.Duration(ms)*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return &greeter.HelloReply{Message: "hello " + name}, nil
}

func (s *greeterServer) SayHelloStream(in *greeter.HelloStreamRequest,
	stream grpc.ServerStreamingServer[greeter.HelloReply]) error {
	s.calls.Add(1)
	if err := stream.SetHeader(s.header()); err != nil {
		return err
	}
	ctx := stream.Context()
	interval := time.Duration(in.GetIntervalMs()) * time.Millisecond
	for i := uint32(0); i < in.GetCount(); i++ {
		if i > 0 && interval > 0 {
			if err := sleep(ctx, interval); err != nil {
				return err
			}
		}
		reply := &greeter.HelloReply{Message: fmt.Sprintf("hello %s %d", in.GetName(), i)}
		if err := stream.Send(reply); err != nil {
			return err
		}
	}
	return nil
}

// sleep waits d, or returns the status of ctx's error if ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// describeIncoming lists the incoming metadata as "k=v" pairs sorted by key and joined by ";"
// (a key with several values gives "k=v1,v2"; pseudo keys such as ":authority" are skipped), then
// "deadline=<remaining ms>" or "deadline=none". The deadline is the handler's: with go-zero's
// server Timeout on, min(incoming grpc-timeout, Timeout).
func describeIncoming(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		if strings.HasPrefix(k, ":") {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]string, 0, len(keys)+1)
	for _, k := range keys {
		pairs = append(pairs, k+"="+strings.Join(md[k], ","))
	}
	if dl, ok := ctx.Deadline(); ok {
		pairs = append(pairs, "deadline="+strconv.FormatInt(time.Until(dl).Milliseconds(), 10))
	} else {
		pairs = append(pairs, "deadline=none")
	}
	return strings.Join(pairs, ";")
}

// event prints one JSON line on stdout.
func event(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fmt.Fprintln(os.Stdout, string(b))
}

func main() {
	flag.Parse()

	var c zrpc.RpcServerConf
	conf.MustLoad(*configFile, &c)

	// Keep stdout for our JSON lines: set logx up ourselves (MustNewServer's SetUp then leaves
	// it alone) and send console logs to stderr instead of go-zero's stdout/stderr split.
	if c.Log.ServiceName == "" {
		c.Log.ServiceName = c.Name
	}
	logx.Must(logx.SetUp(c.Log))
	if c.Log.Mode == "" || c.Log.Mode == "console" {
		logx.SetWriter(logx.NewWriter(os.Stderr))
	}

	tlsConf, err := serverTLS()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gz-server:", err)
		os.Exit(2)
	}

	srv := &greeterServer{name: c.ListenOn, delay: *delay}
	s := zrpc.MustNewServer(c, func(grpcServer *grpc.Server) {
		greeter.RegisterGreeterServer(grpcServer, srv)

		if c.Mode == service.DevMode || c.Mode == service.TestMode {
			reflection.Register(grpcServer)
		}
	})
	if tlsConf != nil {
		s.AddOptions(grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	defer s.Stop()

	event(struct {
		Event    string `json:"event"`
		ListenOn string `json:"listen_on"`
	}{"starting", c.ListenOn})
	s.Start()
	event(struct {
		Event string `json:"event"`
		Calls int64  `json:"calls"`
	}{"stopped", srv.calls.Load()})
}
