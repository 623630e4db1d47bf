package config_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// protoGenerated are the files `make proto` writes from agent/protocol/enginepb/engine.proto.
var protoGenerated = []string{"engine.pb.go", "engine_grpc.pb.go"}

// TestProtoGenerated: the engine host's gRPC code (agent/protocol/enginepb) is exactly what the
// pinned buf and generators make of engine.proto with agent/protocol/buf.gen.yaml, as `make
// proto` runs them; an edit of the .proto without `make proto`, or of the generated code by
// hand, fails here.
func TestProtoGenerated(t *testing.T) {
	bin := root("bin")
	for _, tool := range []string{"buf", "protoc-gen-go", "protoc-gen-go-grpc"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			testenv.Missing(t, "no "+tool+" in "+bin+": run `make proto-tools`")
		}
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(bin, "buf"), "generate", "-o", out)
	cmd.Dir = root("agent", "protocol")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "BUF_CACHE_DIR="+t.TempDir())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("buf generate: %v\n%s", err, b)
	}
	for _, f := range protoGenerated {
		want, err := os.ReadFile(filepath.Join(out, "enginepb", f))
		if err != nil {
			t.Fatalf("buf generate wrote no %s: %v", f, err)
		}
		got, err := os.ReadFile(root("agent", "protocol", "enginepb", f))
		if err != nil {
			t.Fatalf("committed %s: %v", f, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("agent/protocol/enginepb/%s is not what `make proto` generates from engine.proto: run `make proto` and commit the result", f)
		}
	}
	generated, _ := filepath.Glob(filepath.Join(out, "enginepb", "*"))
	if len(generated) != len(protoGenerated) {
		t.Errorf("buf generate wrote %s; want exactly %s", strings.Join(generated, ", "), strings.Join(protoGenerated, ", "))
	}
}
