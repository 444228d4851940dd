# Build the manager, the reference approvals provider and the MCP gateway.
# hack/image builds the same image without Docker (the local cluster's localhost/toolgate/toolgate:dev):
# the same three static binaries, user 65532:65532, entrypoint /manager. Keep the two in step.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH

WORKDIR /workspace
# Copy the Go module manifests and download dependencies first, so that source changes
# do not invalidate the module download layer.
COPY go.mod go.mod
COPY go.sum go.sum
RUN go mod download

# Copy the Go source.
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
COPY pkg/ pkg/

# Static binaries (no cgo): the distroless/static base has no libc.
# GOARCH has no default, so the binaries are built for the platform of the host where the command
# was called unless TARGETARCH is set (docker buildx sets it per --platform).
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w" -o manager ./cmd && \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w" -o reference-provider ./cmd/reference-provider && \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w" -o toolgate-mcp ./cmd/toolgate-mcp

# Use distroless as minimal base image to package the binaries.
# Refer to https://github.com/GoogleContainerTools/distroless for more details.
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/manager .
COPY --from=builder /workspace/reference-provider .
COPY --from=builder /workspace/toolgate-mcp .
USER 65532:65532

# The manager by default; run the reference provider with --entrypoint /reference-provider.
ENTRYPOINT ["/manager"]
