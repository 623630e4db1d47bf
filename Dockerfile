# The operator image: pulumi-operator, the pinned pulumi CLI and the pinned Kubernetes provider
# plugin, so nothing is downloaded at run time. Not built in this project's CI (no Docker engine
# there); the versions below must match go.mod, hack/tools/pulumi/go.mod and the Makefile.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
ARG PULUMI_VERSION=v3.255.0
ARG KUBERNETES_PLUGIN_VERSION=v4.33.0
WORKDIR /src
COPY hack/tools/pulumi/ hack/tools/pulumi/
RUN cd hack/tools/pulumi && CGO_ENABLED=0 go build \
      -ldflags "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=${PULUMI_VERSION}" \
      -o /out/bin/pulumi github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
# The provider's official release, installed by the pinned CLI into the image's plugin directory.
RUN PULUMI_HOME=/out/pulumi-home /out/bin/pulumi plugin install resource kubernetes ${KUBERNETES_PLUGIN_VERSION}
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -o /out/bin/pulumi-operator .

RUN CGO_ENABLED=0 go build -o /out/http-server ./cmd/http-server

# The http server the operator deploys by default (`docker build --target http-server`):
# listens on 8080, runs as 65532 on a read-only root file system.
FROM gcr.io/distroless/static-debian12:nonroot AS http-server
COPY --from=build /out/http-server /usr/local/bin/http-server
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/http-server"]

# The operator (the default, last target).
FROM gcr.io/distroless/static-debian12:nonroot AS operator
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/pulumi-home/ /home/nonroot/.pulumi/
COPY Pulumi.yaml /etc/pulumi-operator/Pulumi.yaml
ENV PULUMI_HOME=/home/nonroot/.pulumi \
    PULUMI_OPERATOR_PROJECT_FILE=/etc/pulumi-operator/Pulumi.yaml \
    PULUMI_OPERATOR_STATE_DIR=/var/lib/pulumi-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/pulumi-operator"]
CMD ["watch"]
