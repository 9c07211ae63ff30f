"""``jobledger drill``: SPEC §8 drills 1–5 against a real database, in queues of their own.

``runner.py`` runs them and collects the evidence; ``app.py`` is the application its worker
processes run.
"""
