# Sourced by the result pages' run scripts: a queue of training runs played in $JOBS lanes.
#
#   source experiments/results/lanes.sh
#   lane_add runs/x/logs/a.seed_1.log "$PY experiments/train.py ... hydra.run.dir=runs/x/a/seed_1"
#   lanes_run            # prints the queue; DRY=1 stops there; else JOBS (default 2) at a time
#
# Each command runs with one OpenMP thread (the 2-core machine runs fastest as two lanes of one
# thread) and appends its output to its log. A run is resumable when its command names its own
# hydra.run.dir: rerunning the queue resumes unfinished runs and skips finished ones.
# lanes_run returns non-zero when any run failed (xargs' 123), so `set -e` scripts stop there.

LANE_CMDS=()
PY=${PY:-.venv/bin/python}  # the Python that runs train.py (override: PY=...)
# OUT (where the runs go) is each script's own default: a default here would win over it

lane_add() {  # lane_add LOG COMMAND: queue COMMAND, its output appended to LOG
  local log=$1
  shift
  mkdir -p "$(dirname "$log")"
  LANE_CMDS+=("OMP_NUM_THREADS=1 $* >>$log 2>&1 && echo \"done $(basename "$log" .log)\"")
}

lanes_run() {  # lanes_run [FILE]: print the queue (also to FILE); with DRY set, stop there
  if [[ ${#LANE_CMDS[@]} -eq 0 ]]; then
    echo "lanes_run: the queue is empty" >&2
    return 2
  fi
  printf '%s\n' "${LANE_CMDS[@]%% >>*}" | tee ${1:+"$1"}
  echo "${#LANE_CMDS[@]} runs, ${JOBS:-2} at a time"
  [[ -z ${DRY:-} ]] || return 0
  printf '%s\0' "${LANE_CMDS[@]}" | xargs -0 -P "${JOBS:-2}" -n 1 bash -c 'eval "$1"' _
}

run_dirs() {  # run_dirs FOLDER...: the run directories FOLDER/seed_* that exist, one per line
  local folder dir
  for folder in "$@"; do
    for dir in "$folder"/seed_*; do [[ -d $dir ]] && echo "$dir"; done
  done
  return 0
}

complete_runs() {  # complete_runs RUN_DIR...: those whose training ended, one per line (the
  # others named on stderr); needs PY
  [[ $# -gt 0 ]] || return 0
  $PY -c 'import sys
from marlgrid.analysis.runs import COMPLETE, find_runs
for run in find_runs(sys.argv[1:]).runs:
    if run.status == COMPLETE:
        print(run.path)
    else:
        print(f"not finished: {run.path} ({run.detail})", file=sys.stderr)' "$@"
}
