"""marlgrid: fast multi-agent MiniGrid-compatible gridworlds.

``marlgrid.make(id)`` gives a PettingZoo ``ParallelEnv`` (``marlgrid.make_aec(id)`` its AEC form;
``pettingzoo.make("parallel" | "aec", id)`` work too); ``marlgrid.make_vec(id, num_envs)`` a
batched env stepping N envs x K agents in one call. Importing this package loads neither torch,
pygame nor hydra.
"""

from marlgrid import _moved
from marlgrid.registry import REGISTRY, make, make_aec, make_vec, register, spec

_moved.install()  # old module paths (marlgrid.engine, marlgrid.follower, ...) still import

__version__ = "0.1.0"
__all__ = ["REGISTRY", "make", "make_aec", "make_vec", "register", "spec", "__version__"]
