"""Small things an operator hit (issue 29, item 9): mcp_gateway_process_resident_memory_bytes is the
worker's resident memory now, as its name and HELP say, not its peak."""

from __future__ import annotations

import resource

from gateway.metrics import Metrics, _resident_bytes


def test_resident_memory_is_the_current_rss_not_the_peak() -> None:
    big = bytearray(300 * 1024 * 1024)  # touch 300 MiB, then give it back: the peak stays, the RSS drops
    for i in range(0, len(big), 4096):
        big[i] = 1
    del big
    metrics = Metrics()
    metrics.sample_process()
    sample = metrics.registry.get_sample_value("mcp_gateway_process_resident_memory_bytes")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    now = _resident_bytes()
    assert now is not None and sample is not None
    assert peak - sample > 200 * 1024 * 1024, (sample, peak)  # far below the peak
    assert abs(sample - now) < 32 * 1024 * 1024, (sample, now)
    text = metrics.exposition().decode()
    (help_line,) = [line for line in text.splitlines() if line.startswith("# HELP mcp_gateway_process_resident_memory_bytes")]
    assert "Peak" not in help_line and "Resident memory" in help_line
