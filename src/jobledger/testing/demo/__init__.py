"""The weekly digest story, end to end: ``jobledger demo``.

``story.py`` runs it (a throw-away database, a fake e-mail provider, worker processes, one of
them killed with SIGKILL mid-run) and returns a report; ``app.py`` is the application the worker
processes run.
"""
