#!/usr/bin/env bash
# A/B on one GPU machine: `pagoda bench WORKLOAD` on a baseline source tree and on this
# checkout, alternating, in one run, so both figures share the machine and its state.
#
#   git archive BASELINE_COMMIT | (mkdir -p .baseline && tar -x -C .baseline)  # here
#   bench/compare_commits.sh .baseline BASELINE_COMMIT OUT_DIR latency throughput -- --backend pagoda
#
# Each tree is installed (not editable) into a folder of its own under /tmp, and each
# result lands in OUT_DIR/<baseline|candidate>/ with the commit it ran (PAGODA_COMMIT).
# Arguments after `--` go to every `pagoda bench` call.
set -euo pipefail

baseline_dir="$(realpath "$1")" baseline_commit="$2" out="$(realpath -m "$3")"
shift 3
workloads=()
while [[ $# -gt 0 && "$1" != "--" ]]; do workloads+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
candidate_commit="${PAGODA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo candidate)}"

baseline_site=/tmp/pagoda-baseline candidate_site=/tmp/pagoda-candidate
install() {  # source tree, site folder
    rm -rf "$2"
    python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target "$2" "$1"
}
install "$baseline_dir" "$baseline_site"
install "$PWD" "$candidate_site"

for workload in "${workloads[@]}"; do
    for side in baseline candidate; do
        site="${side}_site" commit="${side}_commit"
        echo "=== $workload on the $side (${!commit})"
        # from /tmp: a checkout's own operator/ folder must not shadow the standard library
        (cd /tmp && PYTHONPATH="${!site}${PYTHONPATH:+:$PYTHONPATH}" PAGODA_COMMIT="${!commit}" \
            python3 -m pagoda.cli bench "$workload" --out "$out/$side" "$@")
    done
done
