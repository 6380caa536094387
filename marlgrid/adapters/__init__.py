"""marlgrid envs behind other frameworks' APIs: Stable-Baselines3's ``VecEnv`` (:mod:`.sb3`)
and RLlib's multi-agent env (:mod:`.rllib`). Each needs its extra and is imported only when
asked for."""
