"""Measuring a run: phases (`phase_names`, `phases`), resources (`sampler`, reading `proctree`
and `nvml`; `device_memory`; `machine`), jitter, FLOPs and MFU (`flops`) and the verdict, all
gathered by `measure.RunMeasurement`; hardware counters (`counters`) and an operator profile
(`ops_profile`) on request. `results` writes the record, `summary` formats it, with the text
formatting (`formatting`) that the report and the benchmarks share."""
