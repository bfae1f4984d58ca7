from segperf.perf.results import write_json_atomic
from segperf.perf.throughput import TrainThroughput

__all__ = ["TrainThroughput", "write_json_atomic"]
