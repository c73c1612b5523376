"""The Python API: :func:`launch`, :func:`run`, their ``async`` twins, :class:`Tether`
and :class:`Outcome`; ``import tether`` exposes them lazily."""
