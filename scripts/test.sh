#!/usr/bin/env bash
# The whole test suite: installs what it needs, then runs every crate's tests with the ISA-L
# cross-check enabled (the `isal` feature links Debian's libisal).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo test --workspace --features ecstack/isal
