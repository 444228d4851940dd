# One image per program, from the list in hack/images.txt (its `release` rows): each target below is
# named after its image and holds one static binary, user 65532:65532, entrypoint /<binary>.
#
#   docker build --target toolgate -t toolgate:v0.1.0 .                      # the manager (the default)
#   docker build --target reference-provider -t reference-provider:v0.1.0 .
#   docker build --target toolgate-mcp -t toolgate-mcp:v0.1.0 .              # the MCP gateway
#   docker build --target issue-refund -t issue-refund:v0.1.0 .              # the demo tool
#   docker build --target kubectl-toolcall -t kubectl-toolcall:v0.1.0 .      # an agent's client
#   docker build --target mcp-call -t mcp-call:v0.1.0 .                      # an MCPServer's executor
#
# hack/image builds the same images without Docker (hack/cluster.sh); test/installer checks that this
# file follows hack/images.txt.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH

WORKDIR /workspace
# Copy the Go module manifests and download dependencies first, so that source changes
# do not invalidate the module download layer.
COPY go.mod go.mod
COPY go.sum go.sum
RUN go mod download

# Copy the Go source and the list of programs.
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
COPY pkg/ pkg/
COPY hack/images.txt hack/images.txt

# Static binaries (no cgo): the distroless/static base has no libc. GOARCH has no default, so the
# binaries are built for the platform of the host unless TARGETARCH is set (docker buildx sets it per
# --platform). Every `release` row of hack/images.txt: go build -o /out/<binary> <package>.
RUN mkdir /out && grep -v '^#' hack/images.txt | while read -r image binary package where; do \
      [ "${where}" = release ] || continue; \
      CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
        go build -trimpath -ldflags "-s -w" -o "/out/${binary}" "${package}" || exit 1; \
    done

# distroless/static: CA certificates, /etc/passwd with nonroot (65532), /tmp.
# Refer to https://github.com/GoogleContainerTools/distroless for more details.
FROM gcr.io/distroless/static:nonroot AS reference-provider
COPY --from=builder /out/reference-provider /reference-provider
USER 65532:65532
ENTRYPOINT ["/reference-provider"]

FROM gcr.io/distroless/static:nonroot AS toolgate-mcp
COPY --from=builder /out/toolgate-mcp /toolgate-mcp
USER 65532:65532
ENTRYPOINT ["/toolgate-mcp"]

FROM gcr.io/distroless/static:nonroot AS issue-refund
COPY --from=builder /out/issue-refund /issue-refund
USER 65532:65532
ENTRYPOINT ["/issue-refund"]

FROM gcr.io/distroless/static:nonroot AS kubectl-toolcall
COPY --from=builder /out/kubectl-toolcall /kubectl-toolcall
USER 65532:65532
ENTRYPOINT ["/kubectl-toolcall"]

FROM gcr.io/distroless/static:nonroot AS mcp-call
COPY --from=builder /out/mcp-call /mcp-call
USER 65532:65532
ENTRYPOINT ["/mcp-call"]

# The manager last: `docker build .` without --target builds it.
FROM gcr.io/distroless/static:nonroot AS toolgate
COPY --from=builder /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
