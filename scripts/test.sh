#!/usr/bin/env bash
# The whole test suite: installs what it needs, then runs every crate's tests with the ISA-L
# cross-checks enabled (`isal` loads Debian's libisal 2.30, `isal-new` builds the newest ISA-L from the
# isal-sys crate with nasm, about a minute once), and ends with one summary line
# "N passed, N failed" over every test binary.
#
# Time goes to three things: the cold build (most of it), the test binaries (run three at a time by
# scripts/run_tests.py: most of them wait on daemons, clients or one simulation thread), and rainfs/'s
# Maven suite, which runs in the background from the start (Maven mostly fetches and waits) on a copy
# of the module, so that it never shares rainfs/target with the Rust tests that build the jar.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
bash scripts/setup.sh --no-docs
echo "test.sh: setup took $((SECONDS - start)) s"
export PATH="$HOME/.cargo/bin:$PATH"
# setup.sh installed fio and libnbd-bin: a test that cannot find them fails instead of skipping.
export ECSTACK_REQUIRE_CLIENTS=1
# CI builds once into an empty target/: incremental compilation's caches would only cost time there.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi
work=$(mktemp -d)
log="$work/cargo.log"
mvn_pid=""
cleanup() {
  if [ -n "$mvn_pid" ]; then kill "$mvn_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# rainfs/ (Java): Hadoop's FileSystem contract tests and RainFS's own; without mvn this fails, never skips.
cp -r rainfs "$work/rainfs"
rm -rf "$work/rainfs/target"
(
  t=$SECONDS
  cd "$work/rainfs" && mvn -q -B test
  echo "test.sh: rainfs (mvn test, in the background) took $((SECONDS - t)) s"
) >"$work/mvn.log" 2>&1 &
mvn_pid=$!

status=0
t=$SECONDS
python3 scripts/run_tests.py --jobs 3 -- --workspace --no-fail-fast --features ecstack/isal,ecstack/isal-new 2>&1 | tee "$log" || status=$?
echo "test.sh: cargo build and test took $((SECONDS - t)) s"

mvn_status=0
wait "$mvn_pid" || mvn_status=$?
mvn_pid=""
cat "$work/mvn.log"
if [ "$mvn_status" != 0 ]; then
  status=$mvn_status
  echo "rainfs: mvn test failed (status $mvn_status)"
fi
echo "test.sh: $((SECONDS - start)) s in all"
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit $status
