// grpc-edge is a plain grpc-go greeter server that answers at the edges of gRPC: a stream
// reset at the caller's deadline, status details and binary metadata, a message the client
// cannot decode. zrpc's client is tested against it (tests/tests/interop/edge_codes.rs), so that
// the codes it reports are checked against a peer someone else wrote.
//
//	grpc-edge
//
// It listens on three loopback ports and prints one JSON line on stdout:
// {"event":"listening","grpc":"127.0.0.1:p1","raw":"127.0.0.1:p2","aging":"127.0.0.1:p3"}; it
// stops when its stdin closes. The aging port is the same greeter with grpc-go's
// MaxConnectionAge 300 ms (±10% jitter) and MaxConnectionAgeGrace 1 s: a GOAWAY on every
// connection about three times a second.
//
// On the grpc port (grpc-go v1.80 `grpc.Server`, no go-zero), the request's name says what to
// do:
//
//	sleep        SayHello: wait until the call's context ends (grpc-go's transport resets the
//	             stream with RST_STREAM CANCEL at the caller's deadline, whether or not the
//	             response head was sent); SayHelloStream: send the response head and one
//	             message first, and print {"event":"stream-ended","name":"sleep"} when the
//	             context ended
//	details      fail with INVALID_ARGUMENT, a non-ASCII message, a google.rpc.BadRequest in
//	             grpc-status-details-bin, binary metadata in the headers (x-head-bin: 00 01 02
//	             ff) and the trailers (x-trail-bin: ff fe 00 01)
//	bad-message  answer bytes that are not a HelloReply (a field whose length runs past the
//	             message)
//	anything     "hello <name>"; SayHelloStream sends `count` messages "hello <name> <i>"
//	             with `interval_ms` between them
//
// On the raw port, golang.org/x/net/http2's framer answers every stream by its request header
// `x-edge`: `cancel-before-head` resets it with CANCEL at once, `cancel-after-head` sends a
// response head, waits 50 ms and resets it with CANCEL (grpc-go's server offers no handler a
// way to reset a stream before the deadline).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"zrpc-interop/gozero/greeter"
)

// DetailsMessage is the grpc-message of the `details` answer (percent-encoded on the wire).
const DetailsMessage = "nöt välid: 名前 ✓ 100%"

// rawReply is sent as it is, bypassing protobuf.
type rawReply []byte

// codec is grpc-go's proto codec, but for rawReply.
type codec struct{ proto encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(rawReply); ok {
		return mem.BufferSlice{mem.SliceBuffer(r)}, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c codec) Name() string { return "proto" }

func sayHello(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	in := new(greeter.HelloRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	switch in.Name {
	case "sleep":
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	case "details":
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-head-bin", string([]byte{0, 1, 2, 0xff})))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trail-bin", string([]byte{0xff, 0xfe, 0, 1})))
		st, err := status.New(codes.InvalidArgument, DetailsMessage).WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{
				{Field: "name", Description: "must not be «details»"},
			},
		})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	case "bad-message":
		// field 1 (message), length 5, one byte of it
		return rawReply{0x0a, 0x05, 'h'}, nil
	}
	return &greeter.HelloReply{Message: "hello " + in.Name}, nil
}

func sayHelloStream(_ any, stream grpc.ServerStream) error {
	in := new(greeter.HelloStreamRequest)
	if err := stream.RecvMsg(in); err != nil {
		return err
	}
	if in.Name == "sleep" {
		if err := stream.SendMsg(&greeter.HelloReply{Message: "hello sleep 0"}); err != nil {
			return err
		}
		<-stream.Context().Done()
		// grpc-go reset the stream with CANCEL when it ended this context at the deadline
		fmt.Println(`{"event":"stream-ended","name":"sleep"}`)
		return status.FromContextError(stream.Context().Err()).Err()
	}
	for i := uint32(0); i < in.Count; i++ {
		if i > 0 && in.IntervalMs > 0 {
			time.Sleep(time.Duration(in.IntervalMs) * time.Millisecond)
		}
		if err := stream.SendMsg(&greeter.HelloReply{Message: fmt.Sprintf("hello %s %d", in.Name, i)}); err != nil {
			return err
		}
	}
	return nil
}

var service = grpc.ServiceDesc{
	ServiceName: "greeter.Greeter",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "SayHello", Handler: sayHello}},
	Streams: []grpc.StreamDesc{
		{StreamName: "SayHelloStream", Handler: sayHelloStream, ServerStreams: true},
	},
	Metadata: "greeter.proto",
}

// serveRaw answers each stream of one HTTP/2 connection as its `x-edge` header says.
func serveRaw(conn net.Conn) {
	defer conn.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(conn, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		return
	}
	var head bytes.Buffer
	enc := hpack.NewEncoder(&head)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			id := f.StreamID
			switch f.PseudoValue("path") + " " + header(f, "x-edge") {
			case "/greeter.Greeter/SayHello cancel-after-head":
				head.Reset()
				_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
				_ = enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: head.Bytes(), EndHeaders: true})
				time.Sleep(50 * time.Millisecond)
				_ = fr.WriteRSTStream(id, http2.ErrCodeCancel)
			default:
				_ = fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
		case *http2.GoAwayFrame:
			return
		}
	}
}

func header(f *http2.MetaHeadersFrame, name string) string {
	for _, h := range f.RegularFields() {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return ""
}

func main() {
	grpcLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	rawLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	agingLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2("proto")}))
	s.RegisterService(&service, nil)
	go func() { _ = s.Serve(grpcLis) }()
	aging := grpc.NewServer(
		grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2("proto")}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      300 * time.Millisecond,
			MaxConnectionAgeGrace: time.Second,
		}),
	)
	aging.RegisterService(&service, nil)
	go func() { _ = aging.Serve(agingLis) }()
	go func() {
		for {
			conn, err := rawLis.Accept()
			if err != nil {
				return
			}
			go serveRaw(conn)
		}
	}()
	line, _ := json.Marshal(map[string]string{
		"event": "listening",
		"grpc":  grpcLis.Addr().String(),
		"raw":   rawLis.Addr().String(),
		"aging": agingLis.Addr().String(),
	})
	fmt.Println(string(line))
	// runs until its stdin closes (the test that started it ended)
	_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
	s.Stop()
	aging.Stop()
}
