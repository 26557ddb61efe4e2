// Command gzip-interop serves and calls grpc.testing.TestService with grpc-go's gzip compressor
// registered, for the four compression cases of the gRPC interop spec, which grpc-go's stock
// interop programs do not implement (grpc-go issue #1357).
//
//	gzip-interop --mode=server --port=0 [--use_tls --tls_cert_file=... --tls_key_file=...]
//	gzip-interop --mode=client --server_port=N --test_case=CASE [--use_tls --use_test_ca --ca_file=... --server_host_override=...]
//
// The server logs "interop server listening on <address>" on stderr, as grpc-go's interop server
// does at INFO (it listens on 127.0.0.1). It implements
// the CompressedRequest feature (a request with expect_compressed true that came uncompressed is
// INVALID_ARGUMENT) and CompressedResponse: response_compressed true or false answers gzip or
// identity. grpc-go chooses compression per call, not per message, so a StreamingOutputCall
// is compressed as a whole when any of its responses asks for it. The other methods are grpc-go's
// own interop server's.
//
// The client runs client_compressed_unary, server_compressed_unary, client_compressed_streaming
// and server_compressed_streaming and checks each message's compressed flag, as the spec asks. It
// also cannot send one message of a compressed stream uncompressed: in client_compressed_streaming
// its second message goes compressed too (expect_compressed false allows that).
//
// Whether a message came compressed is read from grpc-go's stats: its compressed length differs
// from its length (the cases' payloads are zeros, which gzip shrinks).
//
// One more client case, unary_status, makes one UnaryCall asking for --response_size octets
// (--response_compressed asks for gzip), receiving at most --max_recv_size octets when set, and
// prints the call's status as `status {"code":N,"message":"..."}` on stdout: what a grpc-go client answers,
// for tests that compare another client's answer with it. It exits 0 whatever the status.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/interop"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

var (
	mode       = flag.String("mode", "", "server or client")
	port       = flag.Int("port", 0, "server: the port to listen on (0: any)")
	useTLS     = flag.Bool("use_tls", false, "speak TLS")
	certFile   = flag.String("tls_cert_file", "", "server: the certificate chain (PEM)")
	keyFile    = flag.String("tls_key_file", "", "server: the private key (PEM)")
	serverHost = flag.String("server_host", "127.0.0.1", "client: the server's host")
	serverPort = flag.Int("server_port", 0, "client: the server's port")
	override   = flag.String("server_host_override", "", "client: the name the server certificate must carry")
	caFile     = flag.String("ca_file", "", "client: the CA certificate (PEM)")
	_          = flag.Bool("use_test_ca", false, "client: accepted as grpc-go's client does; the CA is --ca_file")
	testCase   = flag.String("test_case", "", "client: the case to run")
	respSize   = flag.Int("response_size", 0, "client, unary_status: the response payload's size")
	respGzip   = flag.Bool("response_compressed", false, "client, unary_status: ask for a gzip response")
	maxRecv    = flag.Int("max_recv_size", 0, "client, unary_status: the receive limit (0: grpc-go's 4 MiB)")
)

func main() {
	flag.Parse()
	var err error
	switch *mode {
	case "server":
		err = serve()
	case "client":
		err = runCase(*testCase)
	default:
		err = fmt.Errorf("--mode must be server or client, not %q", *mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}

// compression records, for each message received on a call, whether it came compressed.
type compression struct {
	mu   sync.Mutex
	seen []bool
}

func (c *compression) last() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen) > 0 && c.seen[len(c.seen)-1]
}

func (c *compression) all() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]bool(nil), c.seen...)
}

type compressionKey struct{}

// recorder is a stats.Handler that fills the call's *compression (put in its context by TagRPC
// on the server, by the caller on the client).
type recorder struct{ server bool }

func (r recorder) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	if r.server {
		return context.WithValue(ctx, compressionKey{}, &compression{})
	}
	return ctx
}

func (recorder) HandleRPC(ctx context.Context, s stats.RPCStats) {
	in, ok := s.(*stats.InPayload)
	if !ok {
		return
	}
	if c, ok := ctx.Value(compressionKey{}).(*compression); ok {
		c.mu.Lock()
		c.seen = append(c.seen, in.CompressedLength != in.Length)
		c.mu.Unlock()
	}
}

func (recorder) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (recorder) HandleConn(context.Context, stats.ConnStats)                       {}

func received(ctx context.Context) *compression {
	c, _ := ctx.Value(compressionKey{}).(*compression)
	if c == nil {
		return &compression{}
	}
	return c
}

// --- server ---------------------------------------------------------------

type server struct {
	testgrpc.TestServiceServer // grpc-go's interop server for the methods not below
}

func (s server) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if in.GetExpectCompressed().GetValue() && !received(ctx).last() {
		return nil, status.Error(codes.InvalidArgument, "expected a compressed request")
	}
	if rc := in.GetResponseCompressed(); rc != nil {
		if err := setCompressed(ctx, rc.GetValue()); err != nil {
			return nil, err
		}
	}
	return s.TestServiceServer.UnaryCall(ctx, in)
}

func (s server) StreamingInputCall(stream testgrpc.TestService_StreamingInputCallServer) error {
	sum := 0
	for {
		in, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(sum)})
		}
		if err != nil {
			return err
		}
		if in.GetExpectCompressed().GetValue() && !received(stream.Context()).last() {
			return status.Error(codes.InvalidArgument, "expected a compressed request")
		}
		sum += len(in.GetPayload().GetBody())
	}
}

func (s server) StreamingOutputCall(in *testpb.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	asked := false
	for _, p := range in.GetResponseParameters() {
		if p.GetCompressed().GetValue() {
			asked = true
		}
	}
	if asked {
		if err := setCompressed(stream.Context(), true); err != nil {
			return err
		}
	}
	return s.TestServiceServer.StreamingOutputCall(in, stream)
}

func setCompressed(ctx context.Context, on bool) error {
	name := encoding.Identity
	if on {
		name = gzip.Name
	}
	if err := grpc.SetSendCompressor(ctx, name); err != nil {
		return status.Errorf(codes.InvalidArgument, "answer with %s: %v", name, err)
	}
	return nil
}

func serve() error {
	lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	opts := []grpc.ServerOption{grpc.StatsHandler(recorder{server: true})}
	if *useTLS {
		creds, err := credentials.NewServerTLSFromFile(*certFile, *keyFile)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(creds))
	}
	s := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(s, server{interop.NewTestServer()})
	fmt.Fprintf(os.Stderr, "interop server listening on %s\n", lis.Addr())
	return s.Serve(lis)
}

// --- client ---------------------------------------------------------------

func runCase(name string) error {
	creds := insecure.NewCredentials()
	if *useTLS {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("no certificate in %s", *caFile)
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: *override})
	}
	addr := net.JoinHostPort(*serverHost, strconv.Itoa(*serverPort))
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithStatsHandler(recorder{})}
	if *maxRecv > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(*maxRecv)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	tc := testgrpc.NewTestServiceClient(conn)
	ctx := context.Background()
	switch name {
	case "client_compressed_unary":
		return clientCompressedUnary(ctx, tc)
	case "server_compressed_unary":
		return serverCompressedUnary(ctx, tc)
	case "client_compressed_streaming":
		return clientCompressedStreaming(ctx, tc)
	case "server_compressed_streaming":
		return serverCompressedStreaming(ctx, tc)
	case "unary_status":
		return unaryStatus(ctx, tc)
	}
	return fmt.Errorf("unknown test case %q", name)
}

func largeRequest(expect *testpb.BoolValue, respCompressed *testpb.BoolValue) *testpb.SimpleRequest {
	return &testpb.SimpleRequest{
		ResponseType:       testpb.PayloadType_COMPRESSABLE,
		ResponseSize:       314159,
		Payload:            interop.ClientNewPayload(testpb.PayloadType_COMPRESSABLE, 271828),
		ExpectCompressed:   expect,
		ResponseCompressed: respCompressed,
	}
}

func checkBody(p *testpb.Payload, want int) error {
	if got := len(p.GetBody()); got != want {
		return fmt.Errorf("response payload body is %d bytes, want %d", got, want)
	}
	return nil
}

func clientCompressedUnary(ctx context.Context, tc testgrpc.TestServiceClient) error {
	yes, no := &testpb.BoolValue{Value: true}, &testpb.BoolValue{Value: false}
	if _, err := tc.UnaryCall(ctx, largeRequest(yes, nil)); status.Code(err) != codes.InvalidArgument {
		return fmt.Errorf("the uncompressed probe with expect_compressed ended with %v, want InvalidArgument", err)
	}
	r, err := tc.UnaryCall(ctx, largeRequest(yes, nil), grpc.UseCompressor(gzip.Name))
	if err != nil {
		return fmt.Errorf("the compressed call failed: %v", err)
	}
	if err := checkBody(r.GetPayload(), 314159); err != nil {
		return err
	}
	r, err = tc.UnaryCall(ctx, largeRequest(no, nil))
	if err != nil {
		return fmt.Errorf("the uncompressed call failed: %v", err)
	}
	return checkBody(r.GetPayload(), 314159)
}

func serverCompressedUnary(ctx context.Context, tc testgrpc.TestServiceClient) error {
	for _, want := range []bool{true, false} {
		c := &compression{}
		r, err := tc.UnaryCall(context.WithValue(ctx, compressionKey{}, c), largeRequest(nil, &testpb.BoolValue{Value: want}))
		if err != nil {
			return fmt.Errorf("response_compressed %v: %v", want, err)
		}
		if err := checkBody(r.GetPayload(), 314159); err != nil {
			return err
		}
		if got := c.all(); len(got) != 1 || got[0] != want {
			return fmt.Errorf("response_compressed %v: the response came compressed=%v", want, got)
		}
	}
	return nil
}

func clientCompressedStreaming(ctx context.Context, tc testgrpc.TestServiceClient) error {
	probe, err := tc.StreamingInputCall(ctx)
	if err != nil {
		return err
	}
	if err := probe.Send(&testpb.StreamingInputCallRequest{
		ExpectCompressed: &testpb.BoolValue{Value: true},
		Payload:          interop.ClientNewPayload(testpb.PayloadType_COMPRESSABLE, 27182),
	}); err != nil && err != io.EOF {
		return err
	}
	if _, err := probe.CloseAndRecv(); status.Code(err) != codes.InvalidArgument {
		return fmt.Errorf("the uncompressed probe with expect_compressed ended with %v, want InvalidArgument", err)
	}
	stream, err := tc.StreamingInputCall(ctx, grpc.UseCompressor(gzip.Name))
	if err != nil {
		return err
	}
	for _, m := range []*testpb.StreamingInputCallRequest{
		{ExpectCompressed: &testpb.BoolValue{Value: true}, Payload: interop.ClientNewPayload(testpb.PayloadType_COMPRESSABLE, 27182)},
		{ExpectCompressed: &testpb.BoolValue{Value: false}, Payload: interop.ClientNewPayload(testpb.PayloadType_COMPRESSABLE, 45904)},
	} {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	r, err := stream.CloseAndRecv()
	if err != nil {
		return err
	}
	if got := r.GetAggregatedPayloadSize(); got != 73086 {
		return fmt.Errorf("aggregated_payload_size is %d, want 73086", got)
	}
	return nil
}

func serverCompressedStreaming(ctx context.Context, tc testgrpc.TestServiceClient) error {
	c := &compression{}
	stream, err := tc.StreamingOutputCall(context.WithValue(ctx, compressionKey{}, c), &testpb.StreamingOutputCallRequest{
		ResponseType: testpb.PayloadType_COMPRESSABLE,
		ResponseParameters: []*testpb.ResponseParameters{
			{Compressed: &testpb.BoolValue{Value: true}, Size: 31415},
			{Compressed: &testpb.BoolValue{Value: false}, Size: 92653},
		},
	})
	if err != nil {
		return err
	}
	sizes := []int{31415, 92653}
	for i, want := range sizes {
		r, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("response %d: %v", i, err)
		}
		if err := checkBody(r.GetPayload(), want); err != nil {
			return fmt.Errorf("response %d: %v", i, err)
		}
	}
	if _, err := stream.Recv(); err != io.EOF {
		return fmt.Errorf("after 2 responses: %v, want the end", err)
	}
	if got := c.all(); len(got) != 2 || !got[0] || got[1] {
		return fmt.Errorf("responses came compressed=%v, want [true false]", got)
	}
	return nil
}

func unaryStatus(ctx context.Context, tc testgrpc.TestServiceClient) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := &testpb.SimpleRequest{ResponseSize: int32(*respSize)}
	if *respGzip {
		req.ResponseCompressed = &testpb.BoolValue{Value: true}
	}
	_, err := tc.UnaryCall(ctx, req)
	s := status.Convert(err)
	line, err := json.Marshal(map[string]any{"code": s.Code(), "message": s.Message()})
	if err != nil {
		return err
	}
	fmt.Printf("status %s\n", line)
	return nil
}
