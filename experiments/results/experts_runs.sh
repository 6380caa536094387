#!/usr/bin/env bash
# The runs behind experiments/results/experts.md, then their evaluation, curves and figure.
#
#   bash experiments/results/experts_runs.sh                  # part 1: recipe and control, seeds 1-5
#   bash experiments/results/experts_runs.sh recipe:1 control:1   # some runs only (ARM:SEED)
#   PART=2 bash experiments/results/experts_runs.sh   # part 2: 13x13 seed 1, 4 tiles seeds 1-2,
#                                                     # a novice beside trained experts / oracles
#   PART=3 bash experiments/results/experts_runs.sh   # part 3: 4 tiles, gated penalty, seeds 1-2
#   PART=4 bash experiments/results/experts_runs.sh   # part 4: part 3 with 64-step BPTT chunks,
#                                                     # and with a GTrXL core; seed 1 each
#   PART=5 bash experiments/results/experts_runs.sh   # part 5: 13x13, gated penalty, seed 1
#   PART=6 bash experiments/results/experts_runs.sh   # part 6: 4 tiles, gate at 5, 6M steps, seed 1
#   PART=7 bash experiments/results/experts_runs.sh   # part 7: part 5's seed trained on to 16M
#   PART=8 bash experiments/results/experts_runs.sh   # part 8: 13x13 started from a 7x7 expert
#   PART=9 bash experiments/results/experts_runs.sh   # part 9: part 8 with an 8M-step budget
#   PART=10 bash experiments/results/experts_runs.sh  # part 10: part 3 started from a 3-tile expert
#   PART=11 bash experiments/results/experts_runs.sh  # part 11: part 9's seed trained on to 16M
#   PART=12 bash experiments/results/experts_runs.sh  # part 12: part 10's seeds trained on to 6M
#   PART=13 bash experiments/results/experts_runs.sh  # part 13: part 10 with a 6M-step budget
#   PART=14 bash experiments/results/experts_runs.sh  # part 14: part 9 with a 16M-step budget
#   PART=15 bash experiments/results/experts_runs.sh  # part 15: part 10 with 64-step BPTT chunks
#   PART=16 bash experiments/results/experts_runs.sh  # part 16: LSTM 256, a 3-tile stage, then
#                                                     # part 10's 4-tile stage from it (run twice)
#   PART=17 bash experiments/results/experts_runs.sh  # part 17: part 16's chain at 128 units with
#                                                     # the learners seeing position and direction
#   PART=18 bash experiments/results/experts_runs.sh  # part 18: part 10 plus the reward-prediction
#                                                     # loss (agent=ppo_lstm_expert_next_reward)
#   PART=19 bash experiments/results/experts_runs.sh  # part 19: part 18 with a 6M-step budget
#   PART=20 bash experiments/results/experts_runs.sh  # part 20: part 18's control, penalty 1.5
#                                                     # from the first 4-tile step
#   PART=21 bash experiments/results/experts_runs.sh  # part 21: the 4-tile preset at full scale,
#                                                     # started from the 13x13 3-tile expert
#   PART=22 bash experiments/results/experts_runs.sh  # part 22: the same from the 7x7 4-tile expert
#   PART=23 bash experiments/results/experts_runs.sh  # part 23: part 22 without the reward loss
#   PART=24 bash experiments/results/experts_runs.sh  # part 24: part 23 with stages of 0.05, and
#                                                     # with the gate at 18
#   DRY=1 bash experiments/results/experts_runs.sh            # print the commands only
#   ANALYSE=1 bash experiments/results/experts_runs.sh        # no training: evaluate, aggregate and
#                                                             # plot each part whose runs are here
#   PART=4 ANALYSE=1 bash experiments/results/experts_runs.sh # the same for one part only
#
# Two lanes of one torch thread (JOBS=2), the way the 2-core machine runs fastest. Resumable:
# each run has its own directory runs/experts/<arm>/seed_<k>; rerunning resumes an unfinished run
# from its newest checkpoint and skips a finished one. Logs: runs/experts/logs/<arm>.seed_<k>.log.
# Measured: ~1,050 env steps/s per lane on 7x7 (a 3M-step run ~48 min; part 1 ~4 h of both cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
source experiments/results/lanes.sh

PY=${PY:-.venv/bin/python}
JOBS=${JOBS:-2}
OUT=${OUT:-runs/experts}
RESULTS=experiments/results
COMMON="torch_threads=1 video=false logger.progress=false"

# the gated penalty (parts 3, 5, 6 and 8-15): stages of 0.25, raised once the training return holds
STAGES="curriculum=penalty_staged curriculum.penalty.points=null \
'curriculum.penalty.values=[0.0,0.25,0.5,0.75,1.0,1.25,1.5]'"
TILES4="experiment=goal_cycle_expert scale=small env.settings.n_goals=4"  # 4 tiles on 7x7
# part 24's small steps: the penalty in stages of 0.05 from 0 to 1.5
FINE=$(LC_ALL=C seq -s, 0 0.05 1.5)
# part 3's design: 4 tiles, the penalty raised a stage once the training return holds >= 8
GATED="$TILES4 $STAGES curriculum.penalty.threshold=8.0"
# parts 8, 9 and 14: 13x13 with part 5's gate, started from the 7x7 library expert's weights
WARM="experiment=goal_cycle_expert $STAGES curriculum.penalty.threshold=10.0 \
init_from=experiments/experts/goal_cycle_7x7_3agents_expert_seed0.pt"
# part 10: part 3's 4-tile design started from the same 3-tile 7x7 library expert's weights
WARM4="$GATED init_from=experiments/experts/goal_cycle_7x7_3agents_expert_seed0.pt"
# part 17: the recipe's inputs plus the learner's cell and facing
PLACE="'env.settings.agent.extras=[reward,action,position,direction]'"
# parts 2, 5 and 7: 13x13 from scratch, the recipe's full scale before part 14 (8M env steps)
SCRATCH="experiment=goal_cycle_expert init_from=null total_timesteps=8000000"
# arm | overrides
declare -A ARMS=(
  [recipe]="experiment=goal_cycle_expert scale=small"
  [control]="experiment=goal_cycle_expert_fixed_penalty scale=small"
  [canonical]="$SCRATCH scale/recipe_penalty=small \
'curriculum.penalty.points=[[0,0.0],[800000,0.0],[5300000,1.5]]'"
  [tiles4]="$TILES4"
  [tile_curriculum]="experiment=goal_cycle_expert scale=small \
'curriculum.n_goals={mode: step, points: [[0, 3], [2000000, 4]]}' \
name=goal_cycle_expert_tile_curriculum"
  [tiles4_gated]="$GATED name=goal_cycle_expert_gated"
  [tiles4_gated_chunk64]="$GATED agent.chunk_len=64 name=goal_cycle_expert_gated_chunk64"
  [tiles4_gated_gtrxl]="$GATED agent.network.memory=gtrxl \
agent.network.memory_kwargs.memory_length=64 name=goal_cycle_expert_gated_gtrxl"
  [tiles4_gate5]="$TILES4 $STAGES curriculum.penalty.threshold=5.0 \
total_timesteps=6000000 name=goal_cycle_expert_gate5"
  [canonical_gated]="$SCRATCH $STAGES curriculum.penalty.threshold=10.0 \
name=goal_cycle_expert_13x13_gated"
  [canonical_gated_16m]="$SCRATCH $STAGES curriculum.penalty.threshold=10.0 \
total_timesteps=16000000 extend=true name=goal_cycle_expert_13x13_gated_16m"
  [canonical_warm]="$WARM total_timesteps=4000000 name=goal_cycle_expert_13x13_warm"
  [canonical_warm_8m]="$WARM total_timesteps=8000000 name=goal_cycle_expert_13x13_warm_8m"
  [tiles4_warm]="$WARM4 name=goal_cycle_expert_4tiles_warm"
  [canonical_warm_16m]="$WARM total_timesteps=16000000 extend=true \
name=goal_cycle_expert_13x13_warm_16m"
  [tiles4_warm_6m]="$WARM4 total_timesteps=6000000 extend=true name=goal_cycle_expert_4tiles_warm_6m"
  [tiles4_warm_long]="$WARM4 total_timesteps=6000000 name=goal_cycle_expert_4tiles_warm_long"
  [canonical_warm_long]="$WARM total_timesteps=16000000 name=goal_cycle_expert_13x13_warm_long"
  [tiles4_warm_chunk64]="$WARM4 agent.chunk_len=64 name=goal_cycle_expert_4tiles_warm_chunk64"
  [recipe_lstm256]="experiment=goal_cycle_expert scale=small agent.network.hidden_size=256 \
name=goal_cycle_expert_lstm256"
  [tiles4_warm_lstm256]="$GATED agent.network.hidden_size=256 name=goal_cycle_expert_4tiles_warm_lstm256"
  [recipe_position]="experiment=goal_cycle_expert scale=small $PLACE name=goal_cycle_expert_position"
  [tiles4_warm_position]="$GATED $PLACE name=goal_cycle_expert_4tiles_warm_position"
  # (= experiment=goal_cycle_expert_4tiles scale=small, the preset it became)
  [tiles4_warm_next_reward]="$WARM4 agent=ppo_lstm_expert_next_reward \
name=goal_cycle_expert_4tiles_warm_next_reward"
  [tiles4_warm_next_reward_6m]="$WARM4 agent=ppo_lstm_expert_next_reward total_timesteps=6000000 \
name=goal_cycle_expert_4tiles_warm_next_reward_6m"
  [tiles4_warm_next_reward_fixed]="experiment=goal_cycle_expert_4tiles_fixed_penalty scale=small \
name=goal_cycle_expert_4tiles_warm_next_reward_fixed"
  [tiles4_canonical]="experiment=goal_cycle_expert_4tiles \
init_from=experiments/experts/goal_cycle_13x13_3agents_expert_seed1.pt name=goal_cycle_expert_4tiles_13x13"
  [tiles4_canonical_from_7x7]="experiment=goal_cycle_expert_4tiles \
name=goal_cycle_expert_4tiles_13x13_from_7x7"
  [tiles4_canonical_from_7x7_no_loss]="experiment=goal_cycle_expert_4tiles agent=ppo_lstm_expert \
name=goal_cycle_expert_4tiles_13x13_from_7x7_no_loss"
  [tiles4_canonical_fine]="experiment=goal_cycle_expert_4tiles agent=ppo_lstm_expert \
'curriculum.penalty.values=[$FINE]' name=goal_cycle_expert_4tiles_13x13_fine"
  [tiles4_canonical_gate18]="experiment=goal_cycle_expert_4tiles agent=ppo_lstm_expert \
curriculum.penalty.threshold=18.0 name=goal_cycle_expert_4tiles_13x13_gate18"
  [novice_trained]="experiment=novice_with_experts roles=novice_with_trained_experts \
agent=ppo_lstm_expert scale=small 'env.settings.agent.extras=[reward,action]' total_timesteps=1500000 \
'roles.agent_1.checkpoint=\"experiments/experts/goal_cycle_7x7_3agents_expert_seed0.pt\"' \
'roles.agent_2.checkpoint=\"experiments/experts/goal_cycle_7x7_3agents_expert_seed1.pt\"'"
  [novice_oracles]="experiment=novice_with_experts agent=ppo_lstm_expert scale=small \
'env.settings.agent.extras=[reward,action]' total_timesteps=1500000"
)
declare -A DIRS=(
  [recipe]=goal_cycle_expert [control]=goal_cycle_expert_fixed_penalty
  [canonical]=goal_cycle_expert_13x13 [tiles4]=goal_cycle_expert_4tiles
  [tile_curriculum]=goal_cycle_expert_tile_curriculum [tiles4_gated]=goal_cycle_expert_4tiles_gated
  [tiles4_gated_chunk64]=goal_cycle_expert_4tiles_gated_chunk64
  [tiles4_gated_gtrxl]=goal_cycle_expert_4tiles_gated_gtrxl
  [canonical_gated]=goal_cycle_expert_13x13_gated [tiles4_gate5]=goal_cycle_expert_4tiles_gate5
  [canonical_gated_16m]=goal_cycle_expert_13x13_gated_16m [canonical_warm]=goal_cycle_expert_13x13_warm
  [canonical_warm_8m]=goal_cycle_expert_13x13_warm_8m [tiles4_warm]=goal_cycle_expert_4tiles_warm
  [canonical_warm_16m]=goal_cycle_expert_13x13_warm_16m [tiles4_warm_6m]=goal_cycle_expert_4tiles_warm_6m
  [tiles4_warm_long]=goal_cycle_expert_4tiles_warm_long [canonical_warm_long]=goal_cycle_expert_13x13_warm_long
  [tiles4_warm_chunk64]=goal_cycle_expert_4tiles_warm_chunk64
  [recipe_lstm256]=goal_cycle_expert_lstm256 [tiles4_warm_lstm256]=goal_cycle_expert_4tiles_warm_lstm256
  [recipe_position]=goal_cycle_expert_position
  [tiles4_warm_position]=goal_cycle_expert_4tiles_warm_position
  [tiles4_warm_next_reward]=goal_cycle_expert_4tiles_warm_next_reward
  [tiles4_warm_next_reward_6m]=goal_cycle_expert_4tiles_warm_next_reward_6m
  [tiles4_warm_next_reward_fixed]=goal_cycle_expert_4tiles_warm_next_reward_fixed
  [tiles4_canonical]=goal_cycle_expert_4tiles_13x13
  [tiles4_canonical_from_7x7]=goal_cycle_expert_4tiles_13x13_from_7x7
  [tiles4_canonical_from_7x7_no_loss]=goal_cycle_expert_4tiles_13x13_from_7x7_no_loss
  [tiles4_canonical_fine]=goal_cycle_expert_4tiles_13x13_fine
  [tiles4_canonical_gate18]=goal_cycle_expert_4tiles_13x13_gate18
  [novice_trained]=novice_with_trained_experts [novice_oracles]=novice_with_oracles
)
# an arm that trains on from a copy of another arm's run of the same seed (extend=true)
declare -A FROM=([canonical_gated_16m]=canonical_gated [canonical_warm_16m]=canonical_warm_8m
  [tiles4_warm_6m]=tiles4_warm)
# an arm started from the weights of another arm's finished run of the same seed (init_from=)
declare -A AFTER=([tiles4_warm_lstm256]=recipe_lstm256 [tiles4_warm_position]=recipe_position)
[[ ${PART:-} =~ ^([1-9]|1[0-9]|2[0-4])?$ ]] || { echo "PART must be 1 to 24 (got '$PART')" >&2; exit 2; }

chain() {  # chain STAGE2 SEED...: per seed, STAGE2 where its start (AFTER) has ended, else the start
  local second=$1 seed first
  shift
  first=${AFTER[$second]}
  for seed in "$@"; do
    if [[ -n $(complete_runs "$OUT/${DIRS[$first]}/seed_$seed" 2>/dev/null) ]]; then
      DEFAULT+=("$second:$seed")
    else
      DEFAULT+=("$first:$seed")
    fi
  done
}

DEFAULT=()
case ${PART:-1} in
  24) DEFAULT=(tiles4_canonical_fine:1 tiles4_canonical_gate18:1) ;;
  23) DEFAULT=(tiles4_canonical_from_7x7_no_loss:1) ;;
  22) DEFAULT=(tiles4_canonical_from_7x7:1) ;;
  21) DEFAULT=(tiles4_canonical:1) ;;
  20)
    DEFAULT=(tiles4_warm_next_reward_fixed:1 tiles4_warm_next_reward_fixed:2
             tiles4_warm_next_reward_fixed:3)  # seed 3 beside the reading (experts.md)
    ;;
  19) DEFAULT=(tiles4_warm_next_reward_6m:1 tiles4_warm_next_reward_6m:2) ;;
  18) DEFAULT=(tiles4_warm_next_reward:1 tiles4_warm_next_reward:2) ;;
  17) chain tiles4_warm_position 1 2 ;;  # each seed's 4-tile stage once its 3-tile stage has ended
  16) chain tiles4_warm_lstm256 1 2 ;;
  15) DEFAULT=(tiles4_warm_chunk64:1 tiles4_warm_chunk64:2) ;;
  14) DEFAULT=(canonical_warm_long:1) ;;
  13) DEFAULT=(tiles4_warm_long:1 tiles4_warm_long:2) ;;
  12) DEFAULT=(tiles4_warm_6m:1 tiles4_warm_6m:2) ;;
  11) DEFAULT=(canonical_warm_16m:1) ;;
  10) DEFAULT=(tiles4_warm:1 tiles4_warm:2) ;;
  9) DEFAULT=(canonical_warm_8m:1) ;;
  8) DEFAULT=(canonical_warm:1) ;;
  7) DEFAULT=(canonical_gated_16m:1) ;;
  6) DEFAULT=(tiles4_gate5:1) ;;  # seed 2 only if seed 1 passes (experts.md, part 6)
  5) DEFAULT=(canonical_gated:1) ;;
  4) DEFAULT=(tiles4_gated_chunk64:1 tiles4_gated_gtrxl:1) ;;
  3) DEFAULT=(tiles4_gated:1 tiles4_gated:2) ;;
  2)
    # (2026-12-05: after 4-tile seed 1, the tile-curriculum probe ran instead of 4-tile seed 2)
    DEFAULT=(canonical:1 tiles4:1 tile_curriculum:1 novice_trained:1 novice_oracles:1)
    ;;
  *)  # the plan's order: recipe seeds first, controls after
    DEFAULT=(recipe:1 recipe:2 recipe:3 control:1 recipe:4 control:2 recipe:5 control:3 control:4
             control:5)  # fmt: skip
    ;;
esac

folders() {  # folders ARM...: these arms' folders of runs that exist, one per line
  local arm
  for arm in "$@"; do [[ -d $OUT/${DIRS[$arm]} ]] && echo "$OUT/${DIRS[$arm]}"; done
  return 0
}

existing() {  # existing ARM...: the run directories of these arms that exist
  local dirs
  mapfile -t dirs < <(folders "$@")
  run_dirs "${dirs[@]}"
}

analyse_arms() {  # analyse_arms PART ARM...: the evaluation and curves of these arms' runs
  # (CURVES: the metrics drawn; an arm without a curriculum logs no curriculum/penalty)
  local part=$1 eval=(--episodes 200 --seed 777 --rule penalty=1.5) runs dirs metric stem
  local curves=${CURVES:-episodic_return social/rewards social/penalties curriculum/penalty}
  shift
  mapfile -t runs < <(existing "$@")
  [[ ${#runs[@]} -gt 0 ]] || return 0
  OMP_NUM_THREADS=1 $PY $RESULTS/experts_eval.py "${runs[@]}" "${eval[@]}" \
    --csv "$RESULTS/experts_eval_$part.csv"
  mapfile -t dirs < <(folders "$@")
  for metric in $curves; do
    stem=${metric##*/}
    OMP_NUM_THREADS=1 $PY experiments/aggregate.py "${dirs[@]}" --group-by name,scale \
      --metric "$metric" --last 20 --smooth 5 --include-unfinished \
      --out "$RESULTS/experts_${part}_$stem"
    rm -f "$RESULTS/experts_${part}_$stem.md" "$RESULTS/experts_${part}_$stem.png"
  done
}

analyse_part1() {  # the recipe and its fixed-penalty control
  local eval=(--episodes 200 --seed 777 --rule penalty=1.5) runs metric stem
  mapfile -t runs < <(existing recipe control)
  [[ ${#runs[@]} -gt 0 ]] || return 0
  OMP_NUM_THREADS=1 $PY $RESULTS/experts_eval.py "${runs[@]}" "${eval[@]}" \
    --csv "$RESULTS/experts_eval.csv"
  local welch=(--welch name=goal_cycle_expert name=goal_cycle_expert_fixed_penalty)
  for metric in episodic_return social/rewards social/penalties curriculum/penalty; do
    stem=${metric##*/}
    # the control has no curriculum, so it logs no curriculum/penalty: no test for that one
    [[ $metric == curriculum/penalty ]] && welch=()
    OMP_NUM_THREADS=1 $PY experiments/aggregate.py "$OUT/${DIRS[recipe]}" \
      "$OUT/${DIRS[control]}" --group-by name --metric "$metric" --last 20 --smooth 5 \
      "${welch[@]}" --include-unfinished --out "$RESULTS/experts_train_$stem"
    # the page keeps the CSVs; its figures are experts_plot.py's, so aggregate's own page
    # and figure are not kept beside them
    rm -f "$RESULTS/experts_train_$stem.md" "$RESULTS/experts_train_$stem.png"
  done
}

analyse_part2() {  # 13x13 is scale=full, 4 tiles scale=small; every 4-tile run is evaluated at
  # its last stage (4 tiles); the 13x13 run has 3; then the novices beside their experts
  local eval=(--episodes 200 --seed 777 --rule penalty=1.5) runs
  analyse_arms part2 canonical tiles4 tile_curriculum
  mapfile -t runs < <(existing novice_trained novice_oracles)
  [[ ${#runs[@]} -gt 0 ]] || return 0  # the novice and, in the same episodes, its two experts
  OMP_NUM_THREADS=1 $PY $RESULTS/experts_eval.py "${runs[@]}" "${eval[@]}" --partners \
    --csv "$RESULTS/experts_eval_novice.csv"
}

analyse_stages() {  # analyse_stages PART ARM STAGE...: the step at which each run of a gated
  # arm first reached each penalty stage (experts_<part>_stage_<stage>_runs.csv)
  local part=$1 arm=$2 stage
  shift 2
  [[ -d $OUT/${DIRS[$arm]} ]] || return 0
  for stage in "$@"; do
    OMP_NUM_THREADS=1 $PY experiments/aggregate.py "$OUT/${DIRS[$arm]}" --group-by name \
      --metric curriculum/penalty --threshold "$stage" --smooth 1 --include-unfinished \
      --out "$RESULTS/experts_${part}_stage_$stage"
    rm -f "$RESULTS/experts_${part}_stage_$stage".{md,png} "$RESULTS/experts_${part}_stage_${stage}_curves.csv"
  done
}

analyse_part3() {  # the gated penalty, and the step at which each gated run reached a stage
  analyse_arms part3 tiles4_gated
  analyse_stages part3 tiles4_gated 0.25 0.5 0.75
}

ruled_out() {  # ruled_out PART ARM...: agent_0's wrong entries its episode had ruled out
  # (tile_visits.py, greedy at penalty 1.5) into experts_<part>_tile_memory.csv
  local part=$1 runs
  shift
  mapfile -t runs < <(existing "$@")
  [[ ${#runs[@]} -gt 0 ]] || return 0
  OMP_NUM_THREADS=1 $PY $RESULTS/tile_visits.py "${runs[@]}" --greedy --rule penalty=1.5 \
    --episodes 200 --seed 777 --csv "$RESULTS/experts_${part}_tile_memory.csv"
}

analyse_part4() {  # the memory probes, and their measure: mistakes the episode had ruled out
  analyse_arms part4 tiles4_gated_chunk64 tiles4_gated_gtrxl
  [[ -n $(existing tiles4_gated_chunk64 tiles4_gated_gtrxl) ]] || return 0
  ruled_out part4 tiles4_gated_chunk64 tiles4_gated_gtrxl
  local dirs  # each probe's training speed (env steps/s) at its newest logged update
  mapfile -t dirs < <(folders tiles4_gated_chunk64 tiles4_gated_gtrxl)
  $PY experiments/aggregate.py "${dirs[@]}" --group-by name --metric charts/SPS --last 1 \
    --include-unfinished --out "$RESULTS/experts_part4_sps"
  rm -f "$RESULTS/experts_part4_sps".{md,png} "$RESULTS/experts_part4_sps_curves.csv"
}

analyse_part5() {  # 13x13 with the gated penalty, and the step at which it reached each stage
  analyse_arms part5 canonical_gated
  analyse_stages part5 canonical_gated 0.25 0.5 0.75 1.0 1.25 1.5
}

analyse_part6() {  # 4 tiles, gate at 5: evaluation, curves, stages, ruled-out mistakes
  analyse_arms part6 tiles4_gate5
  analyse_stages part6 tiles4_gate5 0.25 0.5 0.75 1.0 1.25 1.5
  ruled_out part6 tiles4_gate5
}

analyse_part7() {  # part 5's seed trained on to 16M: as part 5
  analyse_arms part7 canonical_gated_16m
  analyse_stages part7 canonical_gated_16m 0.25 0.5 0.75 1.0 1.25 1.5
}

analyse_part8() {  # 13x13 started from the 7x7 library expert: as part 5
  analyse_arms part8 canonical_warm
  analyse_stages part8 canonical_warm 0.25 0.5 0.75 1.0 1.25 1.5
}

analyse_part9() {  # part 8's start with an 8M-step budget: as part 8
  analyse_arms part9 canonical_warm_8m
  analyse_stages part9 canonical_warm_8m 0.25 0.5 0.75 1.0 1.25 1.5
}

analyse_part10() {  # part 3 started from the 3-tile library expert: as part 6
  analyse_arms part10 tiles4_warm
  analyse_stages part10 tiles4_warm 0.25 0.5 0.75 1.0 1.25 1.5
  ruled_out part10 tiles4_warm
}

analyse_part11() {  # part 9's seed trained on to 16M: as part 9
  analyse_arms part11 canonical_warm_16m
  analyse_stages part11 canonical_warm_16m 1.5
}

analyse_part12() {  # part 10's seeds trained on to 6M: as part 10
  analyse_arms part12 tiles4_warm_6m
  analyse_stages part12 tiles4_warm_6m 1.5
  ruled_out part12 tiles4_warm_6m
}

analyse_part13() {  # part 10 with a 6M-step budget: as part 10
  analyse_arms part13 tiles4_warm_long
  analyse_stages part13 tiles4_warm_long 0.25 0.5 0.75 1.0 1.25 1.5
  ruled_out part13 tiles4_warm_long
}

analyse_part14() {  # part 9's start with a 16M-step budget: as part 9
  analyse_arms part14 canonical_warm_long
  analyse_stages part14 canonical_warm_long 0.25 0.5 0.75 1.0 1.25 1.5
}

analyse_part15() {  # part 10 with 64-step BPTT chunks: as part 10
  analyse_arms part15 tiles4_warm_chunk64
  analyse_stages part15 tiles4_warm_chunk64 0.25 0.5 0.75 1.0 1.25 1.5
  ruled_out part15 tiles4_warm_chunk64
}

analyse_part16() {  # a wider core: the 3-tile stage's evaluation, then the 4-tile stage as part 10
  analyse_arms part16_3tiles recipe_lstm256
  analyse_arms part16 tiles4_warm_lstm256
  analyse_stages part16 tiles4_warm_lstm256 0.25 0.5 0.75 1.0 1.25 1.5
  ruled_out part16 tiles4_warm_lstm256
}

analyse_part17() {  # position and direction as inputs: as part 16
  analyse_arms part17_3tiles recipe_position
  analyse_arms part17 tiles4_warm_position
  analyse_stages part17 tiles4_warm_position 0.25 0.5 0.75 1.0 1.25 1.5
  ruled_out part17 tiles4_warm_position
}

term_logs() {  # term_logs PART ARM...: the reward-prediction term's loss and accuracy (mean of
  # each run's last 20 logged values) into experts_<part>_next_reward{,_accuracy,_nonzero}_*.csv
  local part=$1 dirs metric stem
  shift
  mapfile -t dirs < <(folders "$@")
  for metric in losses/next_reward losses/next_reward/accuracy losses/next_reward/nonzero; do
    stem=${metric#losses/}
    stem=${stem//\//_}
    OMP_NUM_THREADS=1 $PY experiments/aggregate.py "${dirs[@]}" --group-by name,scale \
      --metric "$metric" --last 20 --include-unfinished --out "$RESULTS/experts_${part}_$stem"
    rm -f "$RESULTS/experts_${part}_$stem".{md,png} "$RESULTS/experts_${part}_${stem}_curves.csv"
  done
}

analyse_part18() {  # part 10 plus the reward-prediction loss: as part 10, and the term's logs
  analyse_arms part18 tiles4_warm_next_reward
  analyse_stages part18 tiles4_warm_next_reward 0.25 0.5 0.75 1.0 1.25 1.5
  ruled_out part18 tiles4_warm_next_reward
  term_logs part18 tiles4_warm_next_reward
}

analyse_part19() {  # part 18 with a 6M-step budget: as part 18
  analyse_arms part19 tiles4_warm_next_reward_6m
  analyse_stages part19 tiles4_warm_next_reward_6m 0.25 0.5 0.75 1.0 1.25 1.5
  ruled_out part19 tiles4_warm_next_reward_6m
  term_logs part19 tiles4_warm_next_reward_6m
}

analyse_part20() {  # part 18's control: as part 18, without stages or a curriculum to draw
  CURVES="episodic_return social/rewards social/penalties" analyse_arms part20 \
    tiles4_warm_next_reward_fixed
  ruled_out part20 tiles4_warm_next_reward_fixed
  term_logs part20 tiles4_warm_next_reward_fixed
}

analyse_part21() {  # the 4-tile preset at full scale: as part 18
  analyse_arms part21 tiles4_canonical
  analyse_stages part21 tiles4_canonical 0.25 0.5 0.75 1.0 1.25 1.5
  ruled_out part21 tiles4_canonical
  term_logs part21 tiles4_canonical
}

analyse_part22() {  # the 4-tile full scale from the 7x7 4-tile expert: as part 21
  analyse_arms part22 tiles4_canonical_from_7x7
  analyse_stages part22 tiles4_canonical_from_7x7 0.25 0.5 0.75 1.0 1.25 1.5
  ruled_out part22 tiles4_canonical_from_7x7
  term_logs part22 tiles4_canonical_from_7x7
}

analyse_part23() {  # part 22 without the loss: its reading (both runs' means from 1M to
  # 1.5M steps), then evaluation, curves and stages (no term logs)
  local runs
  mapfile -t runs < <(existing tiles4_canonical_from_7x7 tiles4_canonical_from_7x7_no_loss)
  [[ ${#runs[@]} -gt 0 ]] || return 0
  $PY $RESULTS/step_window.py "${runs[@]}" --start 1000000 --end 1500000 \
    --csv "$RESULTS/experts_part23_window.csv"
  analyse_arms part23 tiles4_canonical_from_7x7_no_loss
  analyse_stages part23 tiles4_canonical_from_7x7_no_loss 0.25 0.5 0.75 1.0 1.25 1.5
}

analyse_part24() {  # two schedules for the 4-tile full scale: each run's play-safe onset, its
  # means over the last 500k steps it logged, then evaluation, curves, stages, ruled-out mistakes
  local runs arm
  mapfile -t runs < <(existing tiles4_canonical_fine tiles4_canonical_gate18)
  [[ ${#runs[@]} -gt 0 ]] || return 0
  for arm in tiles4_canonical_fine tiles4_canonical_gate18; do
    [[ -d $OUT/${DIRS[$arm]} ]] || continue
    OMP_NUM_THREADS=1 $PY experiments/aggregate.py "$OUT/${DIRS[$arm]}" --group-by name \
      --metric episodic_return --threshold 1.5 --below --smooth 10 --include-unfinished \
      --out "$RESULTS/experts_part24_${arm#tiles4_canonical_}_play_safe"
    rm -f "$RESULTS/experts_part24_${arm#tiles4_canonical_}_play_safe".{md,png} \
      "$RESULTS/experts_part24_${arm#tiles4_canonical_}_play_safe_curves.csv"
  done
  $PY $RESULTS/step_window.py "${runs[@]}" --last 500000 --csv "$RESULTS/experts_part24_window.csv"
  analyse_arms part24 tiles4_canonical_fine tiles4_canonical_gate18
  analyse_stages part24_gate18 tiles4_canonical_gate18 0.25 0.5 0.75 1.0 1.25 1.5
  analyse_stages part24_fine tiles4_canonical_fine 0.25 0.5 0.75 1.0 1.25 1.5
  ruled_out part24 tiles4_canonical_fine tiles4_canonical_gate18
}

analyse() {  # analyse [PART]: that part's evaluation and curves (every part's without one),
  # then the derived tables and the figure
  local part
  for part in ${1:-1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24}; do "analyse_part$part"; done
  $PY $RESULTS/derived_tables.py  # experts_eval_t.csv
  $PY $RESULTS/experts_plot.py
}
if [[ -n ${ANALYSE:-} ]]; then  # set -e holds inside: a failing step stops it
  analyse "${PART:-}"
  exit 0
fi

ITEMS=("$@")
[[ ${#ITEMS[@]} -gt 0 ]] || ITEMS=("${DEFAULT[@]}")
for item in "${ITEMS[@]}"; do  # every item checked before anything is queued
  arm=${item%%:*} seed=${item##*:}
  [[ -n ${ARMS[$arm]:-} ]] || { echo "unknown arm '$arm' in '$item'; arms: ${!ARMS[*]}" >&2; exit 2; }
  [[ $seed =~ ^[0-9]+$ ]] || { echo "seed of '$item' must be a whole number" >&2; exit 2; }
  if [[ -n ${AFTER[$arm]:-} ]]; then  # its start must have ended, or it would take a half-run
    from=$OUT/${DIRS[${AFTER[$arm]}]}/seed_$seed
    [[ -n $(complete_runs "$from" 2>/dev/null) ]] || {
      echo "$arm starts from $from, which has not finished: run ${AFTER[$arm]}:$seed first" >&2
      exit 2
    }
  fi
done
for item in "${ITEMS[@]}"; do
  arm=${item%%:*} seed=${item##*:} run=$OUT/${DIRS[$arm]}/seed_$seed
  if [[ -n ${FROM[$arm]:-} && ! -e $run ]]; then  # the first time: a copy of the run it extends
    from=$OUT/${DIRS[${FROM[$arm]}]}/seed_$seed
    [[ -d $from/checkpoints ]] || { echo "$arm trains on from $from, which has no checkpoints" >&2; exit 2; }
    echo "cp -r $from $run"
    [[ -n ${DRY:-} ]] || { mkdir -p "$(dirname "$run")" && rm -rf "$run.copying" &&
      cp -r "$from" "$run.copying" && mv "$run.copying" "$run"; }
  fi
  init=${AFTER[$arm]:+ init_from=$OUT/${DIRS[${AFTER[$arm]}]}/seed_$seed}
  lane_add "$OUT/logs/${DIRS[$arm]}.seed_$seed.log" "$PY experiments/train.py ${ARMS[$arm]}$init \
seed=$seed $COMMON hydra.run.dir=$OUT/${DIRS[$arm]}/seed_$seed"
done
lanes_run
