// Command testing-descriptors writes the descriptors that grpc-go v1.83.2 compiled from the
// official grpc.testing protos (empty.proto, messages.proto, test.proto) to stdout, as an
// encoded google.protobuf.FileDescriptorSet. zrpc's tests compare them field by field with the
// descriptors of the repository's own proto/grpc/testing/*.proto, so that zrpc's interop programs
// speak exactly the messages grpc-go's do without copying grpc-go's files.
package main

import (
	"fmt"
	"os"

	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	set := &descriptorpb.FileDescriptorSet{}
	for _, f := range []protoreflect.FileDescriptor{
		testpb.File_grpc_testing_empty_proto,
		testpb.File_grpc_testing_messages_proto,
		testpb.File_grpc_testing_test_proto,
	} {
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	out, err := proto.Marshal(set)
	if err != nil {
		fmt.Fprintf(os.Stderr, "encode the descriptor set: %v\n", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(out); err != nil {
		fmt.Fprintf(os.Stderr, "write the descriptor set: %v\n", err)
		os.Exit(1)
	}
}
