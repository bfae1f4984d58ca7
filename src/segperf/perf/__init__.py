"""Measuring a run: phases (`phases`), resources (`resources`, `machine`), jitter, FLOPs and
MFU (`flops`), the verdict, all gathered by `measure.RunMeasurement`; `summary` formats them."""
