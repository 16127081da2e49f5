#!/usr/bin/env bash
# Install what ecstack needs on a Debian machine, idempotently: system packages with apt-get (only the
# missing ones, so a second run does nothing) and a Rust toolchain if there is none.
set -euo pipefail

# python3: scripts/run_tests.py runs the test binaries in parallel.
# libisal-dev: ISA-L, the peer the codes are cross-checked and benchmarked against.
# nasm autoconf automake libtool: build the newest ISA-L from the isal-sys crate (feature ecstack/isal-new).
# fio, libnbd-bin (nbdinfo, nbdcopy): the unmodified clients the NBD export is tested with.
# protobuf-compiler (protoc): the cluster's gRPC messages (crates/cluster/{mds,osd}/proto) are compiled at build time.
# iproute2 (ip, tc): `ecstack experiment codfs` emulates links with network namespaces (crates/cli/tests/experiment_codfs.rs).
# redis-tools (redis-cli, redis-benchmark), redis-server: the clients `ecstack kv serve` is tested with, and its benchmark peer.
# maven, default-jdk-headless: rainfs/ (Java), built and tested with `mvn test` (Hadoop's contract tests).
# borgbackup restic gzip lz4 zstd: `ecstack reduce anchors` (crates/cli/tests/reduce.rs); chromium: the reduce tree picture's headless screenshot test.
PKGS=(build-essential pkg-config python3 libisal-dev nasm autoconf automake libtool fio libnbd-bin protobuf-compiler iproute2 redis-tools redis-server maven default-jdk-headless borgbackup restic gzip lz4 zstd chromium)

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup: not root and no sudo; install these packages yourself: ${PKGS[*]}" >&2
  fi
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The real-client tests fail under CI=true / ECSTACK_REQUIRE_CLIENTS=1 without these: say so now.
for tool in fio nbdinfo nbdcopy protoc redis-cli redis-benchmark mvn java borg restic lz4 zstd chromium; do
  command -v "$tool" >/dev/null 2>&1 || echo "setup: '$tool' is still missing after the install" >&2
done
if command -v fio >/dev/null 2>&1 && ! fio --enghelp=nbd 2>/dev/null | grep -q uri; then
  echo "setup: this fio has no nbd ioengine (Debian's fio package has it)" >&2
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: no Rust toolchain; installing rustup from Debian"
    $SUDO apt-get install -y -qq rustup >/dev/null 2>&1 || {
      echo "setup: could not install rustup with apt-get; install Rust >= 1.89 (https://rustup.rs) and rerun" >&2
      exit 1
    }
    rustup default stable
  fi
fi
