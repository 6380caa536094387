"""Looking at envs: frames (:mod:`.rendering`, drawn from the tile pictures of
:mod:`marlgrid.core.atlas` that RGB observations use too), videos
(:mod:`.video`, :mod:`.record`), and a window to watch or play in (:mod:`.play`, :mod:`.human`).
Nothing here is imported by ``import marlgrid``."""
