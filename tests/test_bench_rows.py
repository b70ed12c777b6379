"""BENCHMARKS.md names how fast the host let a core run while each benchmark ran, beside the load average."""

from typing import Any

from bench import harness


def entry(**fields: Any) -> dict[str, Any]:
    figure = harness.Figure("push p99", 31.0, "ms", "≤ 50 ms", True)
    return {
        "title": "Push",
        "figures": [vars(figure)],
        "machine": {"cores": 2},
        "date": "2026-11-28 00:07 UTC",
        "load_before": 1.5,
        "load_after": 2.1,
        **fields,
    }


def test_each_row_shows_the_cpu_probe_before_and_after_its_benchmark() -> None:
    page = harness.render_markdown(
        {"push": entry(cpu_probe_before_ms=14.5, cpu_probe_after_ms=29.0)}, ["push"], ""
    )

    (row,) = [line for line in page.splitlines() if line.startswith("| 1 | push p99")]
    assert "2 cores, load 1.5→2.1, CPU probe 14.5→29 ms" in row


def test_rows_measured_before_the_probe_existed_show_only_the_load() -> None:
    page = harness.render_markdown({"push": entry()}, ["push"], "")

    (row,) = [line for line in page.splitlines() if line.startswith("| 1 | push p99")]
    assert "| 2 cores, load 1.5→2.1 |" in row


def test_the_probe_is_the_cpu_time_of_a_fixed_loop_in_milliseconds() -> None:
    probe = harness.cpu_probe_ms()

    assert 1 <= probe < 10_000  # a million additions take milliseconds on any machine (not seconds, not zero)
