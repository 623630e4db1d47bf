module github.com/pulumi-operator/pulumi-operator/agent/protocol

go 1.26
