"""Reports of sets of runs, made from their run records (running them is :mod:`keepersim.runs`).

* :mod:`keepersim.report.compare`: a comparison's pairing, aggregates, table and files;
* :mod:`keepersim.report.sweep_summary`, :mod:`keepersim.report.sweep_plots`: a sweep's;
* :mod:`keepersim.report.stats`: t-intervals, oracle efficiency;
* :mod:`keepersim.report.tables`: aligned plain-text tables;
* :mod:`keepersim.report.plots`: the PNG plots (matplotlib, Agg).
"""
