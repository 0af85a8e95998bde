"""Benchmark tables: robolearn's recipes against Stable-Baselines3, over seeds, on one machine.

A table (``configs/benchmark/<name>.yaml``, read by :mod:`robolearn.benchmark.table`) lists entries
(a task, an algorithm, a robolearn experiment, a step budget, return thresholds, the SB3 settings).
:mod:`robolearn.benchmark.schedule` turns it into runs (entry x library x seed), each a run
directory ``<out>/<entry>/<lib>/seed<S>``, interleaved and executed as subprocesses with one thread
each; finished runs are skipped and interrupted ones resumed, so one command regenerates a table
across interruptions. :mod:`robolearn.benchmark.sb3_run` trains the SB3 side and
:mod:`robolearn.benchmark.report` writes the results page from the run directories.

Nothing is imported here: ``import robolearn.benchmark`` has no side effects.
"""
