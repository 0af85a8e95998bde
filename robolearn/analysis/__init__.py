"""Analysis of finished runs: comparing methods over seeds with the interquartile mean, stratified
bootstrap intervals and the probability of improvement (``robolearn compare``).

:mod:`robolearn.analysis.runs` reads run directories into learning curves, groups them into methods
and aligns them on one step grid; :mod:`robolearn.analysis.compare` computes the statistics (with
``rliable``, the optional ``compare`` extra) and renders ``comparison.md``, ``comparison.json`` and
the plots. Neither imports a runner or an algorithm: a run directory's files are the whole input.
"""
