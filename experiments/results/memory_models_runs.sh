#!/usr/bin/env bash
# The runs behind popgym.md (ten memory cores on eight POPGym tasks) and memory_models.md (six
# cores on marlgrid's T-maze and goal cycles), at the scale stated on the pages, seeds 0-2, in
# two lanes that run at the same time (one core each), about 2 hours in all; then the pages'
# tables and figures.
#
#   bash experiments/results/memory_models_runs.sh          # both lanes, then the figures
#   LANE=a bash experiments/results/memory_models_runs.sh   # one lane only (LANE=b the other)
#   LANE=figures bash experiments/results/memory_models_runs.sh
#
# Resumable: every POPGym cell is a trainer run directory runs/popgym_table/<env>/<memory>/seed_k
# and every marlgrid run has its own directory runs/multirun/memcmp_<env>_<memory>/.../seed_k;
# a rerun resumes or skips each. Logs: runs/memory_logs/<lane>.log.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
MEMORIES=lstm,gru,elman,framestack,positional_mlp,linear_recurrence,linear_attention,trxl,gtrxl,none
SMALL_NET="network.hidden_size=64 network.trunk_sizes=[64] network.head_sizes=[64,64]"
MARLGRID_CORES="trxl gru lstm linear_recurrence framestack none"
mkdir -p runs/memory_logs

popgym() {  # one POPGym task: every core, 3 seeds, 50k env steps
    $PY experiments/examples/popgym_sweep.py --sweep --memories $MEMORIES --seeds 0,1,2 --steps 50000 \
        --box-action-bins 5 --threads 1 --quiet --out runs/popgym_table --set $SMALL_NET \
        --envs "$1"
}

# one marlgrid task and core, 3 seeds: marlgrid ENV CORE [STEPS EVAL_EVERY NAME_PREFIX]
# (default 200k env steps, evaluated every 20 updates, runs/multirun/memcmp_<env>_<core>)
marlgrid() {
    $PY experiments/train.py -m "env=$1" agent=ppo_lstm_fast "agent.network.memory=$2" \
        seed=0,1,2 "total_timesteps=${3:-200000}" "name=${5:-memcmp}_$1_$2" video=false \
        logger.progress=false torch_threads=1 "eval_every=${4:-20}" eval_episodes=32
}

lane_a() {
    for env in RepeatFirstEasy RepeatPreviousEasy CountRecallEasy AutoencodeEasy; do
        popgym $env
    done
    for core in $MARLGRID_CORES; do marlgrid goal_cycle_13x13 "$core"; done
    for core in gru none; do  # three times longer, evaluated every 60 updates
        marlgrid goal_cycle_13x13 "$core" 600000 60 memcmp_long
    done
}

lane_b() {
    for env in PositionOnlyCartPoleEasy PositionOnlyPendulumEasy MultiarmedBanditEasy \
        HigherLowerEasy; do
        popgym $env
    done
    for core in $MARLGRID_CORES; do
        marlgrid memory_tmaze "$core"
        marlgrid goal_cycle_7x7 "$core"
    done
}

figures() {
    local envs=RepeatPreviousEasy,RepeatFirstEasy,CountRecallEasy,AutoencodeEasy
    envs=$envs,PositionOnlyCartPoleEasy,PositionOnlyPendulumEasy,MultiarmedBanditEasy
    envs=$envs,HigherLowerEasy
    popgym "$envs"  # every cell is finished: this writes runs/popgym_table/summary.{csv,md}
    $PY experiments/results/popgym_plot.py runs/popgym_table/summary.csv \
        --png experiments/results/popgym_mmer.png --csv experiments/results/popgym_summary.csv
    mkdir -p experiments/results/memory_models
    for env in memory_tmaze goal_cycle_7x7 goal_cycle_13x13; do
        $PY experiments/aggregate.py runs/multirun/memcmp_${env}_* \
            --group-by agent.network.memory --metric eval/return --last 3 --backend rliable \
            --title "$env" --out "experiments/results/memory_models/$env"
        $PY experiments/aggregate.py runs/multirun/memcmp_${env}_* \
            --group-by agent.network.memory --last 20 --backend rliable \
            --title "$env, training return" --out "experiments/results/memory_models/${env}_train"
    done
    $PY experiments/aggregate.py runs/multirun/memcmp_long_goal_cycle_13x13_* \
        --group-by agent.network.memory --metric eval/return --last 3 --backend rliable \
        --title "goal_cycle_13x13, 600k steps" \
        --out experiments/results/memory_models/goal_cycle_13x13_600k
    $PY -c "from experiments.plot_curves import scripted_baselines as b
for e in ('MarlGrid-GoalCycle-7x7-v0', 'MarlGrid-GoalCycle-13x13-v0'): print(e, b(e, {}, 100))"
}

case "${LANE:-both}" in
    a) lane_a > runs/memory_logs/a.log 2>&1 ;;
    b) lane_b > runs/memory_logs/b.log 2>&1 ;;
    figures) figures ;;
    both)
        lane_a > runs/memory_logs/a.log 2>&1 &
        lane_b > runs/memory_logs/b.log 2>&1
        wait
        figures
        ;;
    *) echo "LANE must be a, b, both or figures, got ${LANE}" >&2; exit 2 ;;
esac
