"""Reading sweeps: what a results table says. Settings folded over seeds and compared (``results``,
``stats``: the one definition of "within noise"), loss curves fitted through fully trained budgets
(``curves``, ``ladder``), the seed papers' claims (``claims``) and a design's power to decide them
(``power``), the report and its page (``report``, ``page``), and the answer for a user's budgets
(``advise``). Running sweeps is ``slm.tune``; this package reads what it wrote (``slm.records.table``,
``slm.records.plan``: the records both sides share) and never runs anything, nor imports ``slm.tune``.
"""
