"""jobledger keeps its tables itself (``manage.py migrate`` creates them): no Django models."""
