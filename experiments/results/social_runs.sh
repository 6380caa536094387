#!/usr/bin/env bash
# The runs behind the five social-learning pages (experiments/results/social_*.md), at the small
# scale stated there (scale=small: 7x7 maps, 100-step episodes), seeds 0-2, in two lanes that
# run at the same time (one core each, torch_threads=1), about 1.5 hours in all. The pages'
# aggregate and tile_visits.py commands then make their figures and tables.
#
#   bash experiments/results/social_runs.sh          # both lanes
#   LANE=a bash experiments/results/social_runs.sh   # one lane only (LANE=b for the other)
#   DRY=1 bash experiments/results/social_runs.sh    # print the commands only, run nothing
#
# Resumable: every run has its own directory runs/multirun/<preset>/scale=small/seed_<k>;
# rerunning resumes unfinished runs and skips finished ones. Logs: runs/social_logs/<lane>.log.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
SEEDS="seed=0,1,2"

run() {  # run TRAIN_ARGS...: one train.py sweep (printed, not run, with DRY set)
    local cmd=("$PY" experiments/train.py -m "$@")
    if [[ -n ${DRY:-} ]]; then echo "${cmd[*]}"; else "${cmd[@]}"; fi
}

RUN="run scale=small torch_threads=1 video=false logger.progress=false"

lane_a() {
    $RUN experiment=cluttered_experts seed=0  # one set of experts for every novice
    $RUN experiment=cluttered_solo $SEEDS
    local experts=runs/multirun/cluttered_experts/scale=small/seed_0/checkpoints/NEWEST.pt
    [[ -n ${DRY:-} ]] || experts=$(ls runs/multirun/cluttered_experts/scale=small/seed_0/checkpoints/ckpt_*.pt | tail -n 1)
    $RUN experiment=cluttered_with_experts $SEEDS "roles.agent_1.checkpoint=\"$experts\""
    $RUN experiment=refresh_off $SEEDS
    $RUN experiment=expert_curriculum_shared $SEEDS
    $RUN experiment=solo_novice total_timesteps=1000000 $SEEDS
}

lane_b() {
    $RUN experiment=solo_novice $SEEDS
    $RUN experiment=blind_solo_novice $SEEDS
    $RUN experiment=blind_novice_with_experts $SEEDS
    $RUN experiment=refresh_on $SEEDS
    $RUN experiment=expert_fixed_penalty_shared $SEEDS
    run name=refresh_tmaze agent.refresh_interval=0,2 $SEEDS video=false logger.progress=false
}

if [[ -n ${DRY:-} ]]; then  # the commands of the lanes asked for, nothing run
    case "${LANE:-both}" in a) lane_a ;; b) lane_b ;; *) lane_a; lane_b ;; esac
    exit 0
fi
mkdir -p runs/social_logs
case "${LANE:-both}" in
    a) lane_a > runs/social_logs/a.log 2>&1 ;;
    b) lane_b > runs/social_logs/b.log 2>&1 ;;
    both)
        lane_a > runs/social_logs/a.log 2>&1 &
        lane_b > runs/social_logs/b.log 2>&1
        wait
        ;;
    *) echo "LANE must be a, b or both, got ${LANE}" >&2; exit 2 ;;
esac
