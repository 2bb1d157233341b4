"""Training on Ray Train: one loop for every method (see loop.py), strategies, callbacks, budgets."""
