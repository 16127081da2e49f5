#!/usr/bin/env python3
"""Runs every test binary of the workspace, several at once, then the doc tests.

`cargo test` runs its test binaries one after another, and most of ours spend their time waiting on
processes they started (the cluster's daemons, fio, nbdcopy, Maven, Chromium) or on one thread of a
simulation: on a 2-core machine one binary at a time leaves a core idle for most of the suite. This
builds everything with `cargo test --no-run`, then runs the binaries from a pool of `--jobs` workers
(the known long ones first), each in its package's directory with the environment `cargo test` gives
it, and prints each binary's whole output when it ends, under the same "Running" line cargo prints.
The "test result:" lines are cargo's own, so the summary in scripts/test.sh counts them as before.

Usage: run_tests.py [--jobs N] -- CARGO_TEST_ARGS...   (e.g. --workspace --features ecstack/isal)
Exit status: 0 when every binary and the doc tests passed, 1 otherwise.
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

# Binaries that take a minute or more on a 2-core machine start first, so the pool does not end on
# one long binary while the other workers are idle (longest first: the makespan is then close to
# the total divided by the workers).
LONG_FIRST = [
    "cluster_faults",
    "metadata",
    "mount",
    "cluster_faults_mount",
    "mount_write_behind",
    "experiment_codfs",
    "robust_cluster",
    "service",
    "rainfs",
    "bench_admission",
    "kv_bench",
    "mds_backup",
    "tour",
    "analyze",
    "tween_nbd",
    "shard",
    "reduce",
    "array_fio",
    "reliability",
    "zombienand",
]


def build(cargo_args):
    """Builds every test binary; returns (executables, ok)."""
    cmd = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics"] + cargo_args
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    found = []
    for line in proc.stdout:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact":
            continue
        if not msg.get("profile", {}).get("test") or not msg.get("executable"):
            continue
        target = msg["target"]
        found.append(
            {
                "exe": msg["executable"],
                "name": target["name"],
                "kind": target["kind"][0],
                "src": target["src_path"],
                "manifest_dir": os.path.dirname(msg["manifest_path"]),
                "package_id": msg["package_id"],
            }
        )
    return found, proc.wait() == 0


def package_env(b):
    """The environment `cargo test` runs a test binary with (the parts our tests read)."""
    env = dict(os.environ)
    env["CARGO_MANIFEST_DIR"] = b["manifest_dir"]
    # package_id: "path+file:///work/crates/array#ecstack-array@0.1.0" (or "…#0.1.0" when the
    # directory's name is the package's).
    tail = b["package_id"].rsplit("#", 1)[-1]
    name, _, version = tail.rpartition("@")
    if not name:
        name, version = os.path.basename(b["manifest_dir"]), tail
    env["CARGO_PKG_NAME"] = name
    env["CARGO_PKG_VERSION"] = version
    env["CARGO_CRATE_NAME"] = b["name"].replace("-", "_")
    env.setdefault("CARGO", "cargo")
    deps = os.path.dirname(b["exe"])
    env["LD_LIBRARY_PATH"] = deps + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def run_one(b):
    start = time.monotonic()
    rel = os.path.relpath(b["src"], b["manifest_dir"])
    label = "unittests " + rel if b["kind"] in ("lib", "bin") else rel
    out = subprocess.run(
        [b["exe"]],
        cwd=b["manifest_dir"],
        env=package_env(b),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    secs = time.monotonic() - start
    head = f"     Running {label} ({os.path.relpath(b['exe'])}) [{os.path.basename(b['manifest_dir'])}, {secs:.1f} s]\n"
    return b, out.returncode, head + out.stdout.decode("utf-8", "replace")


def order(binaries):
    def rank(b):
        return LONG_FIRST.index(b["name"]) if b["name"] in LONG_FIRST else len(LONG_FIRST)

    return sorted(binaries, key=rank)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=3, help="test binaries run at once (default 3)")
    p.add_argument("cargo_args", nargs="*", help="arguments for cargo test (after --)")
    a = p.parse_args()
    if a.jobs < 1:
        sys.exit("run_tests.py: --jobs must be at least 1")
    binaries, built = build(a.cargo_args)
    if not built:
        print("run_tests.py: the build failed", flush=True)
    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        running = [pool.submit(run_one, b) for b in order(binaries)]
        for done in concurrent.futures.as_completed(running):
            b, code, text = done.result()
            sys.stdout.write(text)
            sys.stdout.flush()
            if code != 0:
                failed.append(b["exe"])
    # Doc tests compile each example: one cargo call, after the binaries.
    doc = subprocess.run(["cargo", "test", "--doc"] + a.cargo_args)
    if doc.returncode != 0:
        failed.append("doc tests")
    for f in failed:
        print(f"run_tests.py: FAILED {f}", flush=True)
    return 0 if built and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
