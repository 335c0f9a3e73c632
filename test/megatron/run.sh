#!/usr/bin/env bash
# Megatron differential suite: moec vs. real Megatron-Bridge 0.3.1 / Megatron-Core 0.16.1 (CPU).
# Usage: test/megatron/run.sh PATH/TO/moec [extra differential.py args]
#        test/megatron/run.sh --exports PATH/TO/moec   (every example's export, test/megatron/exports.py)
#        test/megatron/run.sh --roundtrip PATH/TO/moec (Bridge's MoE recipes: to_yaml, import, check,
#                                                      export, validate; test/megatron/roundtrip.py)
#        test/megatron/run.sh --schedule PATH/TO/moec PATH/TO/moerun (moerun's learning rate per step
#                                                      against OptimizerParamScheduler; schedule.py)
#        test/megatron/run.sh --providers PATH/TO/moec (model providers without an offline recipe:
#                                                      import defines the model; test/megatron/providers.py)
#        test/megatron/run.sh --router PATH/TO/moert-route (the runtime's router against Megatron-Core's
#                                                      topk_routing_with_score_function; router.py)
#        test/megatron/run.sh --delta-rule PATH/TO/moert-delta-rule --block-tool PATH/TO/moert-gdn (the gated delta rule against
#                                                      Megatron-Core's torch_chunk_gated_delta_rule; gdn.py)
#        test/megatron/run.sh --vision PATH/TO/moert-vision (the runtime's vision tower against transformers'
#                                                      Qwen3VLMoeVisionModel; vision.py)
#        test/megatron/run.sh --image-patches PATH/TO/moerun-mkdata (moerun-mkdata --images against transformers'
#                                                      Qwen2VLImageProcessor; image_patches.py)
#        test/megatron/run.sh --hf-reference PATH/TO/moec --moerun M --driver D --mkdata K --mpirun R --work DIR
#                                                     (moerun against transformers' Qwen3-MoE on the same
#                                                      weights and tokens; test/runtime/train/hf_reference.py)
# Env: MEGATRON_DIFF_COUNT (default 2000: the whole run takes 30-40 s on 2 cores),
#      MEGATRON_DIFF_SEED (default 1), MOEC_MEGATRON_VENV (venv location, see scripts/megatron-venv.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
mode=differential
case "${1:-}" in
  --roundtrip | --schedule | --providers | --exports | --router | --delta-rule | --vision | --image-patches | \
    --hf-reference)
    mode="${1#--}"; shift ;;
esac
tool="${1:?usage: run.sh [--roundtrip|--exports|--providers|--schedule] PATH/TO/moec, or --router PATH/TO/moert-route}"
shift
args=(--moec "$tool")
[ "$mode" = router ] || [ "$mode" = delta-rule ] || [ "$mode" = vision ] && args=(--tool "$tool")
[ "$mode" = image-patches ] && args=(--mkdata "$tool")
case "$mode" in
  roundtrip) args+=(--doc "$root/docs/megatron-bridge.md") ;;
  schedule) args+=(--moerun "${1:?usage: run.sh --schedule PATH/TO/moec PATH/TO/moerun}"); shift ;;
  differential)
    args+=(--count "${MEGATRON_DIFF_COUNT:-2000}" --seed "${MEGATRON_DIFF_SEED:-1}"
           --summary "${MEGATRON_DIFF_SUMMARY:-${TMPDIR:-/tmp}/megatron-differential.json}") ;;
esac
py="$("$root/scripts/megatron-venv.sh")"
script="$here/$mode.py"
[ "$mode" = hf-reference ] && script="$root/test/runtime/train/hf_reference.py"
[ "$mode" = delta-rule ] && script="$here/gdn.py"
[ "$mode" = image-patches ] && script="$here/image_patches.py"
exec "$py" "$script" "${args[@]}" "$@"
