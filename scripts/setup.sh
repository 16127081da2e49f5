#!/usr/bin/env bash
# Install what ecstack needs on a Debian machine, idempotently: system packages with apt-get (only the
# missing ones, so a second run does nothing) and a Rust toolchain if there is none; then build
# `ecstack` (release) and install its man pages (`man ecstack`, `man ecstack-array-create`, ...) into
# /usr/local/share/man/man1 and its bash completion into /usr/local/share/bash-completion/completions
# (zsh and fish beside them). `--no-docs` skips the build and the pages (scripts/test.sh).
set -euo pipefail
DOCS=1
for arg in "$@"; do
  case "$arg" in
    --no-docs) DOCS=0 ;;
    *) echo "setup: unknown option '$arg' (known: --no-docs)" >&2; exit 2 ;;
  esac
done

# python3: scripts/run_tests.py runs the test binaries in parallel. xxd: README's tour pipes a cluster read into it (crates/cli/tests/tour.rs).
# libisal-dev: ISA-L, the peer the codes are cross-checked and benchmarked against.
# nasm autoconf automake libtool: build the newest ISA-L from the isal-sys crate (feature ecstack/isal-new).
# fio, libnbd-bin (nbdinfo, nbdcopy): the unmodified clients the NBD export is tested with.
# protobuf-compiler (protoc): the cluster's gRPC messages (crates/cluster/{mds,osd}/proto) are compiled at build time.
# iproute2 (ip, tc): `ecstack experiment codfs` emulates links with network namespaces (crates/cli/tests/experiment_codfs.rs).
# redis-tools (redis-cli, redis-benchmark), redis-server: the clients `ecstack kv serve` is tested with, and its benchmark peer.
# maven, default-jdk-headless: rainfs/ (Java), built and tested with `mvn test` (Hadoop's contract tests).
# postgresql: the MDS's PostgreSQL store is tested on a throwaway server (crates/testkit/src/postgres.rs runs initdb and postgres from /usr/lib/postgresql/*/bin).
# borgbackup restic gzip lz4 zstd: `ecstack reduce anchors` (crates/cli/tests/reduce.rs); chromium: the reduce tree picture's headless screenshot test.
PKGS=(build-essential pkg-config python3 xxd libisal-dev nasm autoconf automake libtool fio libnbd-bin protobuf-compiler iproute2 redis-tools redis-server maven default-jdk-headless postgresql borgbackup restic gzip lz4 zstd chromium)

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
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || echo "setup: PostgreSQL's initdb is still missing after the install" >&2
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

if [ "$DOCS" = 1 ]; then
  # Man pages and completions come from the clap definitions (`ecstack generate-docs`, hidden).
  cd "$(dirname "$0")/.."
  cargo build --release -q -p ecstack
  gen=$(mktemp -d)
  trap 'rm -rf "$gen"' EXIT
  target/release/ecstack generate-docs --out "$gen" >/dev/null
  man1=/usr/local/share/man/man1
  bashc=/usr/local/share/bash-completion/completions
  zshc=/usr/local/share/zsh/site-functions
  fishc=/usr/local/share/fish/vendor_completions.d
  $SUDO mkdir -p "$man1" "$bashc" "$zshc" "$fishc"
  $SUDO install -m 644 "$gen"/man/*.1 "$man1"/
  $SUDO install -m 644 "$gen"/completions/ecstack.bash "$bashc"/ecstack
  $SUDO install -m 644 "$gen"/completions/_ecstack "$zshc"/_ecstack
  $SUDO install -m 644 "$gen"/completions/ecstack.fish "$fishc"/ecstack.fish
  command -v mandb >/dev/null 2>&1 && $SUDO mandb -q 2>/dev/null || true
  echo "setup: $(ls "$gen"/man | wc -l) man pages in $man1 (man ecstack), completions in $bashc"
fi
