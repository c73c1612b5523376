"""A benchmark that holds tether against GNU ``timeout``, measure by measure.

Speed claims about tether are made here, by measuring real processes and real
signals, and never by timed assertions in the tests. ``python -m benchmarks``
runs the eight measures of issue 6 with the contenders' trials interleaved,
prints Markdown tables of medians, 90th percentiles and ratios against the
targets, writes every raw sample to JSON and plots the latency distributions
as SVG. ``docs/performance.md`` explains the method and what the numbers mean.

Modules: :mod:`benchmarks.run` (the command line), :mod:`benchmarks.measures`
(the trials), :mod:`benchmarks.evaluation` (an evaluation runner's
workload), :mod:`benchmarks.doors` (how each contender is started),
:mod:`benchmarks.procs` (processes, the FIFO, ``/proc``),
:mod:`benchmarks.stats`, :mod:`benchmarks.report`, :mod:`benchmarks.plot`;
``command.py`` and ``announce.sh`` are the commands that are supervised.
"""
