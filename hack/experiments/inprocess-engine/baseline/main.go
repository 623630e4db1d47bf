// Command baseline imports what the prototype imports except pkg/v3 (the operator's stack,
// infra and api/v1 packages and client-go), and does nothing: the package-init baseline.
package main

import (
	_ "github.com/pulumi-operator/pulumi-operator/api/v1"
	_ "github.com/pulumi-operator/pulumi-operator/infra"
	_ "github.com/pulumi-operator/pulumi-operator/stack"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/clientcmd"
)

func main() {}
