"""External task suites as gymnasium envs (no torch): POPGym (:mod:`.popgym_env`) and Memory
Gym's grid tasks (:mod:`.memory_gym_env`). Each is imported only when asked for."""
