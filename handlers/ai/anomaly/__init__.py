"""Anomaly detection over the gateway's own traffic: no model needed.

`detect` (pure, in detect.py) reads traffic buckets, rare events and per-digest latency buckets
that the gateway records (gateway.evidence) and returns anomalies with their evidence: counts,
baselines, the digests involved — never row data, statement literals or secrets.
"""
