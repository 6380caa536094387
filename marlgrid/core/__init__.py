"""The compiled world: the numba step kernels (:mod:`.kernels`), the batched engine that owns
the arrays (:mod:`.engine`), layouts (:mod:`.layout`), rules (:mod:`.rules`) and the tile atlas
that frames are drawn from (:mod:`.atlas`)."""
