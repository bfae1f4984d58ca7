"""Where ValidationMetrics and quality_section lived before they joined the callbacks (PerfMonitor
uses them in any user's Trainer): segperf.callbacks.validation_metrics. Kept for the old import
path and conf key (`segperf.training.quality.ValidationMetrics`)."""

from segperf.callbacks.validation_metrics import (  # noqa: F401
    ValidationMetrics,
    default_metric,
    is_validation_metric,
    quality_section,
    results_key,
)
