# The operator image: pulumi-operator, the pinned pulumi CLI (also the engine host) and the pinned
# Kubernetes provider plugin, so nothing is downloaded at run time. Not built in this project's CI
# (no Docker engine there). GO_VERSION is go.mod's toolchain line without "go", and
# KUBERNETES_PLUGIN_VERSION the pulumi-kubernetes SDK's version in go.mod (internal/pins checks
# both); the CLI's version is read from agent/go.mod at build time.
#
# Build arguments (the defaults build the image users get, downloading what they need):
#   BUILD_IMAGE, RUNTIME_IMAGE      base images, e.g. from a mirror or a local registry
#   PULUMI_KUBERNETES_PLUGIN_FILE   the provider plugin archive (or binary) as a path inside the
#                                   build context, e.g. .local/plugins/pulumi-resource-kubernetes-
#                                   v4.33.0-linux-amd64.tar.gz: installed with `pulumi plugin
#                                   install --file`, nothing downloaded (air-gapped builds; the
#                                   same file `make plugins` takes). Empty: the official release.
#                                   The plugin must run on RUNTIME_IMAGE: the official release is
#                                   static, as distroless/static requires.
# RUN --mount needs BuildKit (Docker 23+) or buildah/podman.
ARG GO_VERSION=1.26.11
ARG BUILD_IMAGE=golang:${GO_VERSION}
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

# The build stage runs on the target platform (emulated by BuildKit/QEMU for another one, e.g.
# `make docker-build PLATFORM=linux/arm64`), not on --platform=$BUILDPLATFORM as a cross-compiling
# scaffold would: the pinned CLI built here also installs the provider plugin, and `pulumi plugin
# install` fetches the plugin for the platform the CLI itself runs on. TARGETOS and TARGETARCH
# (set by BuildKit and buildah) still name the Go target explicitly.
FROM ${BUILD_IMAGE} AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG KUBERNETES_PLUGIN_VERSION=v4.33.0
ENV GOOS=${TARGETOS} GOARCH=${TARGETARCH}
WORKDIR /src
COPY agent/ agent/
COPY hack/cli-overlay.sh hack/
# The pinned CLI, which is also the operator's engine host under the name pulumi-operator-engine
# (a symbolic link; agent/cmd/pulumi says why one binary): the CLI's main package compiled into
# agent/cmd/pulumi through hack/cli-overlay.sh's overlay, as `make build` does. -trimpath,
# CGO_ENABLED=0: the flags of the host's builds (Makefile), so that a build sharing the host's Go
# build cache (`make image` mounts it) compiles nothing the host already did. -s -w: no symbol
# table and no DWARF in the image's binaries, which makes them much smaller; stack traces keep
# their function names and lines. The version the CLI reports is the pkg/v3 agent/go.mod requires,
# as in the Makefile's PULUMI_VERSION.
RUN sh hack/cli-overlay.sh /tmp/cli-overlay.json && \
    cd agent && version="$(go list -m -f '{{.Version}}' github.com/pulumi/pulumi/pkg/v3)" && \
    CGO_ENABLED=0 go build -trimpath -overlay /tmp/cli-overlay.json \
      -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=${version}" \
      -o /out/bin/pulumi ./cmd/pulumi && \
    ln -s pulumi /out/bin/pulumi-operator-engine
# The provider plugin, installed by the pinned CLI into the image's plugin directory: from the
# file when one is given, else the official release. The ARG comes after the CLI build so that
# setting it keeps the CLI's layer. The install log is not part of the image.
ARG PULUMI_KUBERNETES_PLUGIN_FILE=
RUN --mount=type=bind,target=/ctx PULUMI_HOME=/out/pulumi-home /out/bin/pulumi plugin install \
      resource kubernetes ${KUBERNETES_PLUGIN_VERSION} \
      ${PULUMI_KUBERNETES_PLUGIN_FILE:+--file /ctx/${PULUMI_KUBERNETES_PLUGIN_FILE}} && \
    rm -rf /out/pulumi-home/logs
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/bin/pulumi-operator .

RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/http-server ./cmd/http-server
# The state directory, owned by the operator's user: `docker run` without a volume works too
# (/var/lib is root's); in Kubernetes the state volume is mounted over it.
RUN mkdir -p /out/state

# The http server the operator deploys by default (`docker build --target http-server`):
# listens on 8080, runs as 65532 on a read-only root file system.
FROM ${RUNTIME_IMAGE} AS http-server
COPY --from=build /out/http-server /usr/local/bin/http-server
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/http-server"]

# The operator (the default, last target).
FROM ${RUNTIME_IMAGE} AS operator
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/pulumi-home/ /home/nonroot/.pulumi/
COPY --from=build --chown=65532:65532 /out/state/ /var/lib/pulumi-operator/
COPY Pulumi.yaml /etc/pulumi-operator/Pulumi.yaml
ENV PULUMI_HOME=/home/nonroot/.pulumi \
    PULUMI_OPERATOR_PROJECT_FILE=/etc/pulumi-operator/Pulumi.yaml \
    PULUMI_OPERATOR_STATE_DIR=/var/lib/pulumi-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/pulumi-operator"]
CMD ["watch"]
