"""Run bookkeeping: run directories and their locks, checkpoints, saved runs read back, the
logger, resource estimates, launching away from the caller, ``extend=true``, sweep stops and
zero-shot transfer of a saved run. (Not ``runs/``: that name is the ignored folder of run
outputs.)"""
