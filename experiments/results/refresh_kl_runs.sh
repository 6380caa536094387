#!/usr/bin/env bash
# The correction of social_refresh.md (issue 23): refreshing on vs off on the T-maze, both arms
# logging the same KL (agent.log_batch_kl=true: losses/approx_kl_batch, states rerun from the
# rollout's start). The default agent ppo_lstm (refresh every 2 minibatches) vs
# agent.refresh_interval=0; 200k env steps, seeds 0-4; two lanes of one torch thread.
#
#   bash experiments/results/refresh_kl_runs.sh            # runs (resumable), then the tables
#   DRY=1 bash experiments/results/refresh_kl_runs.sh      # print the commands only
#   ANALYSE=1 bash experiments/results/refresh_kl_runs.sh  # only the tables and figures
#
# Each run has its own directory runs/refresh_kl/refresh_<N>/seed_<k>: a rerun resumes an
# unfinished run from its newest checkpoint and skips a finished one.
set -euo pipefail
cd "$(dirname "$0")/../.."
source experiments/results/lanes.sh

PY=${PY:-.venv/bin/python}
JOBS=${JOBS:-2}
OUT=${OUT:-runs/refresh_kl}
SEEDS=${SEEDS:-"0 1 2 3 4"}
STEPS=${STEPS:-200000}
COMMON="total_timesteps=$STEPS agent.log_batch_kl=true torch_threads=1 video=false"
COMMON="$COMMON logger.progress=false"
PAGE=experiments/results/social

if [[ -z ${ANALYSE:-} ]]; then
  for seed in $SEEDS; do
    for refresh in 2 0; do
      lane_add "$OUT/logs/refresh_$refresh.seed_$seed.log" "$PY experiments/train.py \
name=refresh_kl_tmaze agent.refresh_interval=$refresh seed=$seed $COMMON \
hydra.run.dir=$OUT/refresh_$refresh/seed_$seed"
    done
  done
  lanes_run
  [[ -z ${DRY:-} ]] || exit 0
fi

agg() {  # agg METRIC LAST STEM [extra aggregate options]
  local metric=$1 last=$2 stem=$3
  shift 3
  OMP_NUM_THREADS=1 $PY experiments/aggregate.py "$OUT"/refresh_0 "$OUT"/refresh_2 \
    --group-by agent.refresh_interval --metric "$metric" --last "$last" \
    --welch agent.refresh_interval=0 agent.refresh_interval=2 --out "$PAGE/$stem" "$@"
}
agg episodic_return 20 refresh_kl_tmaze_return --threshold 0.9 --smooth 5
agg approx_kl_batch 1000 refresh_kl_tmaze_kl_batch
agg approx_kl 1000 refresh_kl_tmaze_kl_minibatch
agg update_time 1000 refresh_kl_tmaze_update_time
