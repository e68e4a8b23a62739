"""The store conformance suite (conformance.py) run on every store zarrsql has."""
