#!/usr/bin/env bash
# Installs MinIO, the peer `ecstack bench cluster` measures the cluster against (docs/benchmarks.md),
# into $HOME/peers/bin/minio (the benchmark's default --minio path) through the Go module proxy.
# Not run by CI: the benchmark is not a test. Needs Go (>= 1.24); takes minutes on 2 cores.
# Usage: scripts/install-minio.sh [VERSION]   (default: latest)
set -euo pipefail
version="${1:-latest}"
bin="${GOBIN:-$HOME/peers/bin}"
if ! command -v go >/dev/null 2>&1; then
    echo "install-minio: go is not installed (https://go.dev/doc/install, or apt-get install golang-go if recent enough)" >&2
    exit 1
fi
mkdir -p "$bin"
echo "install-minio: go install github.com/minio/minio@$version into $bin" >&2
GOBIN="$bin" go install "github.com/minio/minio@$version"
"$bin/minio" --version
