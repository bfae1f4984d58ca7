"""Measurement maths with no Lightning callback in it: phases (`phase_names`, `phases`), the
sample rate (`train_rate`), resources (`sampler`, reading `proctree` and `nvml`; `device_memory`;
`machine`), jitter, FLOPs and MFU (`flops`, `peak`), the verdict and its advice, hardware
counters' reading (`counters`). The callbacks that measure a run with them are segperf.callbacks
(PerfMonitor). `results` writes the record, `summary` formats it, with the text formatting
(`formatting`) that the report and the benchmarks share. `decision` is the one rule that decides
whether two sets of runs differ beyond noise, which the report, the tuner and segperf.compare share."""
