# syntax=docker/dockerfile:1.7
# graphsync's image for users with Docker (see docker-compose.yml). The build
# machines have no Docker: they use scripts/services.sh instead.

FROM golang:1.26-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags="-s -w" -o /out/graphsync ./cmd/graphsync
# The runtime image has no shell, curl or wget, so the healthcheck is a tiny
# static HTTP probe built here (standard library only).
COPY <<'PROBE' /probe/main.go
package main

import (
	"net/http"
	"os"
	"time"
)

func main() {
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(os.Args[1])
	if err != nil || resp.StatusCode != http.StatusOK {
		os.Exit(1)
	}
}
PROBE
RUN cd /probe && go mod init probe && go build -ldflags="-s -w" -o /out/httpprobe .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/graphsync /usr/local/bin/graphsync
COPY --from=build /out/httpprobe /usr/local/bin/httpprobe
USER nonroot:nonroot
# Built without cgo, the image has no local embedding model (ONNX Runtime
# needs cgo and glibc): vectors come from an OpenAI-compatible server
# (GRAPHSYNC_EMBEDDER=openai, GRAPHSYNC_EMBED_URL, GRAPHSYNC_EMBED_MODEL) or
# not at all. docs/embeddings.md.
ENV GRAPHSYNC_HTTP_ADDR=:8080 \
    GRAPHSYNC_WAKE=stream \
    GRAPHSYNC_EMBEDDER=none
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/httpprobe", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/usr/local/bin/graphsync"]
CMD ["sync"]
