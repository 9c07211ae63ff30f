"""Integrations with the frameworks applications are written in.

``jobledger.contrib.django``: a backend for Django's Tasks framework (see docs/integrations.md).
Each integration imports its framework; ``import jobledger`` imports none of them.
"""
