"""One module per environment (a ``MarlGridEnv`` subclass each), registered by path in
:mod:`marlgrid.registry`."""
