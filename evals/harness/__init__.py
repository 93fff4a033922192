"""Shared pieces of the retrieval evaluations (``evals/run_eval.py``, ``evals/run_longconv.py``).

``dataset`` and ``paraphrase`` read and check the golden set, ``metrics`` holds the pure
metric functions, ``gates`` the thresholds, ``server`` opens a stub to a live server,
``runner`` plays the golden set through it and ``report`` prints and serialises the result.
"""
