// Tools module: builds protoc-gen-go and protoc-gen-go-grpc, the code generators buf runs for the
// engine host's gRPC code (agent/protocol/enginepb, `make proto`). protoc-gen-go is the version of
// the protobuf module the root and protocol modules link, so that the generated code matches the
// runtime it runs with; buf has a module of its own (hack/tools/buf) because it needs a newer
// protobuf than that.
module github.com/pulumi-operator/pulumi-operator/hack/tools/protoc-gen

go 1.26.0

tool (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
