"""``benchmarks/scheduling.py --go``: reading Karpenter's ``go test -bench`` output and pairing it with rows."""

from __future__ import annotations

from benchmarks.scheduling import Row, format_go_table, go_benchmark_name, parse_go_benchmark

OUTPUT = """goos: linux
pkg: sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling
BenchmarkScheduling100-2\t       1\t 793154393 ns/op\t        20.00 nodes\t       100.0 pods\t       126.1 pods/sec
BenchmarkScheduling100-2\t       1\t 750239394 ns/op\t        20.00 nodes\t       100.0 pods\t       133.3 pods/sec
BenchmarkScheduling100-2\t       1\t 759605365 ns/op\t        20.00 nodes\t       100.0 pods\t       131.6 pods/sec
BenchmarkIgnorePreferences-2\t       1\t2156765614 ns/op\t        21.00 nodes\t      4000 pods\t      1855 pods/sec
PASS
"""


def row(workload: str, pods: int, policy: str, rate: float) -> Row:
    return Row(workload, pods, policy, rate, pods / rate, 1, 0, 1.0, 1.0, 0.5, 0.5, ())


def test_median_pods_per_second_per_benchmark() -> None:
    assert parse_go_benchmark(OUTPUT) == {"BenchmarkScheduling100": 131.6, "BenchmarkIgnorePreferences": 1855.0}


def test_rows_pair_with_the_go_benchmark_of_the_same_input() -> None:
    assert go_benchmark_name(row("diverse", 100, "Ignore", 1.0)) == "BenchmarkScheduling100"
    assert go_benchmark_name(row("preference", 4000, "Respect", 1.0)) == "BenchmarkRespectPreferences"
    assert go_benchmark_name(row("mixed", 5000, "Respect", 1.0)) is None
    table = format_go_table(
        [row("diverse", 100, "Respect", 13160.0), row("generic", 100, "Respect", 9.0)],
        parse_go_benchmark(OUTPUT),
    )
    assert "100.0x" in table and "generic" not in table
