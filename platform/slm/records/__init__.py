"""Records shared by the running and the reading side of a sweep: its plan (``slm.records.plan``) and its results
schema and files (``slm.records.table``)."""
