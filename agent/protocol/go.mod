module github.com/pulumi-operator/pulumi-operator/agent/protocol

go 1.26

toolchain go1.26.11
