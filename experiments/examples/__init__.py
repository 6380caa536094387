"""Examples of using marlgrid from other frameworks (RLlib, Stable-Baselines3), the POPGym sweep
and a plugin of outside code (``plugin/myext.py``)."""
