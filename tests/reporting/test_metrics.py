"""`MetricsBuffer`: rates and means are averaged over the logging window, counts are summed."""

from accelerate import Accelerator

from hf_grpo.reporting.metrics import MetricsBuffer


def test_counts_are_summed_and_other_metrics_averaged():
    buffer = MetricsBuffer()
    for value in (1.0, 0.0, 2.0):
        buffer.add("kl", value)
        buffer.add("numerics/log_ratio_clamped_tokens", value, reduce="sum")
    logs = buffer.reduce(Accelerator(cpu=True))
    assert logs == {"kl": 1.0, "numerics/log_ratio_clamped_tokens": 3.0}
    assert buffer.reduce(Accelerator(cpu=True)) == {}
