"""Recommendations from measured evidence: each names its evidence and the exact change to make."""
