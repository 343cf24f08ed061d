#!/usr/bin/env bash
# Compares benchmarks of two commits in one run: it builds each package's
# test binary at BASE and at HEAD (default: the work tree) and runs them
# alternately, ROUNDS times each, so both meet the same machine load. The
# raw outputs go to OUT (default /tmp/paddock-bench), and benchstat, when
# installed (go install golang.org/x/perf/cmd/benchstat@latest), prints
# the comparison. Which side runs first alternates from round to round.
#
#   scripts/bench-compare.sh BASE [PKG:BENCH:BENCHTIME ...]
#
# e.g. scripts/bench-compare.sh HEAD~3 ./nodes/:BenchmarkExecTrue:400x
# Environment: ROUNDS (default 3), OUT, and anything the benchmarks read
# (PADDOCK_BENCH_EVENTS for the projector's).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: scripts/bench-compare.sh BASE [PKG:BENCH:BENCHTIME ...]}
shift
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(./nodes/:BenchmarkExecTrue:400x ./projector/:BenchmarkRebuild:1x)
rounds=${ROUNDS:-3}
out=${OUT:-/tmp/paddock-bench}
mkdir -p "$out"
wt=$(mktemp -d)
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true; rm -rf "$wt"' EXIT
git worktree add --detach "$wt" "$base" >/dev/null
echo "base $(git -C "$wt" log --oneline -1)"
echo "head $(git log --oneline -1)$(git diff --quiet || echo ' (+ work tree changes)')"
for spec in "${specs[@]}"; do
  IFS=: read -r pkg bench benchtime <<<"$spec"
  name=$(echo "$pkg" | tr -c 'a-zA-Z0-9\n' '_')
  (cd "$wt" && go test -c -o "$out/base$name.test" "$pkg")
  go test -c -o "$out/head$name.test" "$pkg"
  : >"$out/base$name.txt"
  : >"$out/head$name.txt"
  for i in $(seq "$rounds"); do
    # Alternate which side goes first, so neither always meets the
    # machine warmed up by the other.
    order="base head"
    [ $((i % 2)) -eq 0 ] && order="head base"
    for side in $order; do
      dir=$([ "$side" = base ] && echo "$wt" || pwd)
      (cd "$dir/$pkg" && "$out/$side$name.test" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" -test.count 1) \
        | tee -a "$out/$side$name.txt" | grep -E '^Benchmark' | sed "s/^/$side round $i: /"
    done
  done
  if command -v benchstat >/dev/null; then
    benchstat "$out/base$name.txt" "$out/head$name.txt" || true
  fi
done
