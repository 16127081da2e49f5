#!/usr/bin/env bash
# The whole test suite: installs what it needs, then runs every crate's tests with the ISA-L
# cross-checks enabled (`isal` loads Debian's libisal 2.30, `isal-new` builds the newest ISA-L from the
# isal-sys crate with nasm, about a minute once), and ends with one summary line
# "N passed, N failed" over every test binary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-docs
export PATH="$HOME/.cargo/bin:$PATH"
# setup.sh installed fio and libnbd-bin: a test that cannot find them fails instead of skipping.
export ECSTACK_REQUIRE_CLIENTS=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --no-fail-fast --features ecstack/isal,ecstack/isal-new 2>&1 | tee "$log" || status=$?
# rainfs/ (Java): Hadoop's FileSystem contract tests and RainFS's own; without mvn this fails, never skips.
(cd rainfs && mvn -q -B test) || { status=$?; echo "rainfs: mvn test failed (status $status)"; }
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit $status
