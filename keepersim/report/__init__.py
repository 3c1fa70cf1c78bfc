"""Comparisons of health policies: runs over seeds, aggregates, tables, plots.

* :mod:`keepersim.report.compare`: ``compare(scenarios, policies, seeds, out_dir, ...)``;
* :mod:`keepersim.report.stats`: t-intervals, oracle efficiency;
* :mod:`keepersim.report.tables`: aligned plain-text tables;
* :mod:`keepersim.report.plots`: the PNG plots (matplotlib, Agg).

(The function ``compare`` is deliberately not re-exported here: it would shadow the module
``keepersim.report.compare``.)
"""
