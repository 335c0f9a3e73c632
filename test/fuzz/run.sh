#!/usr/bin/env bash
# Builds the libFuzzer targets and runs them (docs/reliability.md).
#
#   test/fuzz/run.sh TARGET|all SECONDS [RUNS]
#
# TARGET is parser, check, layout, hfconfig, planreader or plan. Each target
# runs until SECONDS have passed or RUNS inputs were tried (default: no run
# limit), whichever comes first, with a 1 s limit per input and 2 GB of
# memory, at the lowest priority. Its corpus grows in build-fuzz/corpus/TARGET
# (seeded from test/fuzz/seeds, examples/ and the malformed corpus); crashing
# inputs land in build-fuzz/artifacts/TARGET/ and the log in
# build-fuzz/logs/TARGET.log. Exit status 1 if any target found something.
#
# Environment: MOEC_FUZZ_BUILD_DIR (default build-fuzz), MOEC_FUZZ_JOBS
# (parallel build jobs, default 2), MOEC_FUZZ_FLAGS (extra libFuzzer flags),
# MOEC_FUZZ_WORKER (a name for a second run of the same target on another
# core: it shares the corpus, which libFuzzer rereads, and logs to
# logs/TARGET-NAME.log; the executions of the runs add up).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${MOEC_FUZZ_BUILD_DIR:-$root/build-fuzz}"
all_targets=(parser check layout hfconfig planreader plan)

if [ $# -lt 2 ]; then
  echo "usage: $0 TARGET|all SECONDS [RUNS]   (targets: ${all_targets[*]})" >&2
  exit 2
fi
if [ "$1" = all ]; then targets=("${all_targets[@]}"); else targets=("$1"); fi
seconds="$2"
runs="${3:--1}"

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 -DMOEC_FUZZ=ON -DMOEC_RUNTIME=OFF >/dev/null
fi
ninja -C "$build" -j"${MOEC_FUZZ_JOBS:-2}" "${targets[@]/#/fuzz-}" >/dev/null

# Seeds that are not committed under test/fuzz/seeds: the examples and the
# files of the malformed corpus (split out of its tests).
extra="$build/extra-seeds"
if [ ! -d "$extra" ]; then
  mkdir -p "$extra/moe"
  find "$root/examples" -name '*.moe' -exec cp {} "$extra/moe/" \;
  for t in "$root"/test/lit/malformed/*.test "$root"/test/lit/diag/*.test; do
    /usr/lib/llvm-14/bin/split-file "$t" "$extra/split/$(basename "$t" .test)" 2>/dev/null || true
  done
  if [ -d "$extra/split" ]; then
    find "$extra/split" -type f -size -64k -name '*.moe' -exec sh -c 'cp "$1" "$2/$(echo "$1" | md5sum | cut -c1-16).moe"' _ {} "$extra/moe" \;
  fi
  rm -rf "$extra/split"
fi

status=0
mkdir -p "$build/logs"
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  artifacts="$build/artifacts/$t/${MOEC_FUZZ_WORKER:+worker-$MOEC_FUZZ_WORKER/}"
  mkdir -p "$corpus" "$artifacts"
  seeds=("$root/test/fuzz/seeds/$t")
  [ -d "$root/test/fuzz/regressions/$t" ] && seeds+=("$root/test/fuzz/regressions/$t")
  flags=(-timeout=1 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts")
  case "$t" in
    parser | check) flags+=(-dict="$root/test/fuzz/moe.dict" -max_len=8192); seeds+=("$extra/moe") ;;
    # Entropic scheduling updates a frequency per feature on every input;
    # moec plan's output gives tens of thousands of features, and the update
    # took a quarter of the target's time.
    plan) flags+=(-max_len=4096 -entropic=0) ;;
  esac
  log="$build/logs/$t${MOEC_FUZZ_WORKER:+-$MOEC_FUZZ_WORKER}.log"
  : >"$log"
  echo "fuzz-$t: ${seconds}s, runs ${runs}; log $log" >&2
  # libFuzzer's -timeout is wall-clock time: on a loaded machine at nice 19 an
  # input can pass 1 s while waiting for a CPU. A timeout is rerun alone; if
  # it then finishes within the limit it is set aside under load-timeouts/
  # and fuzzing resumes (the corpus carries over); otherwise it is a finding.
  start=$SECONDS deadline=$((SECONDS + seconds)) left_runs="$runs" executed=0
  while :; do
    before=$(grep -c '^stat::number_of_executed_units' "$log" || true)
    left=$((deadline - SECONDS))
    ((left > 0)) || break
    # shellcheck disable=SC2086
    # libFuzzer's timeout handler allocates inside a signal handler, and if
    # the alarm lands inside ASan's allocator the process deadlocks (seen
    # once, under CI load): a fuzzer still alive a minute past its time is
    # killed, so the script always ends.
    rc=0
    timeout -s KILL $((left + 60)) nice -n 19 "$build/test/fuzz/fuzz-$t" "${flags[@]}" -max_total_time="$left" \
      -runs="$left_runs" ${MOEC_FUZZ_FLAGS:-} "$corpus" "${seeds[@]}" >>"$log" 2>&1 || rc=$?
    ((rc == 0)) && ok=1 || ok=0
    if ((rc == 137)) && ((SECONDS >= deadline + 60)); then
      echo "fuzz-$t: the fuzzer stopped responding and was killed at its deadline (see $log)" | tee -a "$log" >&2
    fi
    n=0
    if (($(grep -c '^stat::number_of_executed_units' "$log" || true) > before)); then
      n=$(grep '^stat::number_of_executed_units' "$log" | tail -1 | awk '{print $2}')
    fi
    executed=$((executed + n))
    ((ok)) && break
    if ((left_runs > 0)); then left_runs=$((left_runs - n)); fi
    last=$(ls -t "$artifacts" 2>/dev/null | grep -v -e '^load-timeouts$' -e '^worker-' | head -1 || true)
    if [[ "$last" == timeout-* ]]; then
      # The faster of two reruns: the machine's load varies too.
      ms=$(for _ in 1 2; do "$build/test/fuzz/fuzz-$t" "$artifacts$last" 2>&1 |
        sed -n 's/^Executed .* in \([0-9]*\) ms$/\1/p'; done | sort -n | head -1)
      if [ -n "$ms" ] && ((ms < 1000)); then
        echo "fuzz-$t: $last took ${ms} ms alone: a load-induced timeout; resuming" | tee -a "$log" >&2
        mkdir -p "${artifacts}load-timeouts" && mv "$artifacts$last" "${artifacts}load-timeouts/"
        continue
      fi
    fi
    echo "fuzz-$t: FOUND SOMETHING (see $log and $artifacts)" >&2
    status=1
    break
  done
  echo "fuzz-$t: executed $executed inputs in $((SECONDS - start)) s" | tee -a "$log" >&2
done
exit $status
