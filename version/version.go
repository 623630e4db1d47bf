// Package version holds the project's version: the tag of the images it publishes
// (the operator and the http server) and the http server image the operator deploys by
// default. The Dockerfile, the kustomize image and the Helm chart's appVersion carry the same
// string (config/config_test.go keeps them in step).
package version

// Version is the project's release version, without a leading "v".
const Version = "0.1.0"

// HTTPServerImage is the http server image (cmd/http-server, Dockerfile target http-server)
// of this version.
const HTTPServerImage = "ghcr.io/pulumi-operator/http-server:" + Version
