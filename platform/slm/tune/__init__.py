"""Budget sweeps on Ray Tune: the plan, the sweep, the results table, the report and the advice."""
