"""The tune's own settings (conf/tune.yaml `tune.*`) and its starting overrides, checked before
anything runs: one line per problem, naming the setting and a value that works."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from segperf.errors import SegperfError, SettingsError


def checked_settings(config: DictConfig, arguments: list[str]) -> Any:
    """The tune's settings (`config.tune`), or SettingsError with every problem of them and of the
    starting overrides (`arguments`), one line each."""
    settings = config.get("tune")
    if settings is None:
        raise SegperfError(
            "hydra/sweeper=segperf_tuner needs the tune settings of conf/tune.yaml: run python -m segperf.tune"
        )
    if problems := settings_problems(settings) + sweep_problems(arguments):
        raise SettingsError(problems)
    return settings


def settings_problems(settings: Any) -> list[str]:
    """Every out-of-range tune setting, one line each."""
    problems = []
    checks = [
        ("budget_minutes", settings.budget_minutes > 0, "must be > 0 minutes, e.g. 10"),
        ("level", 0 < settings.level < 1, "must be between 0 and 1, e.g. 0.95"),
        ("min_runs", settings.min_runs >= 2, "must be >= 2 (one run has no spread to judge noise by)"),
        ("max_runs", settings.max_runs >= settings.min_runs, f"must be >= tune.min_runs ({settings.min_runs})"),
        (
            "later_noise",
            settings.get("later_noise") is None or 0 <= settings.later_noise < 1,
            "must be between 0 and 1 (one run's relative scatter, e.g. 0.05), or null for this machine's record",
        ),
        ("probe.steps", settings.probe.steps >= 2, "must be >= 2 timed steps (one has no spread), e.g. 8"),
        ("probe.max_steps", settings.probe.max_steps >= settings.probe.steps, "must be >= tune.probe.steps, e.g. 32"),
        (
            "probe.precision",
            0 < settings.probe.precision < 1,
            "must be between 0 and 1 (a relative half-width), e.g. 0.05",
        ),
        ("probe.val_images", settings.probe.val_images >= 1, "must be >= 1"),
        ("probe.time_limit_factor", settings.probe.time_limit_factor >= 1, "must be >= 1, e.g. 3"),
        ("probe.min_time_limit_s", settings.probe.min_time_limit_s > 0, "must be > 0 seconds, e.g. 60"),
        (
            "probe.screen_factor",
            settings.probe.screen_factor == 0 or settings.probe.screen_factor > 1,
            "must be > 1 (a probe below 1/factor of the best's images/s is stopped), or 0 for no screening",
        ),
        ("probe.screen_steps", settings.probe.screen_steps >= 1, "must be >= 1 timed steps, e.g. 2"),
        ("quality.tolerance", settings.quality.tolerance >= 0, "must be >= 0, e.g. 0.02"),
    ]
    for name, ok, what in checks:
        if not ok:
            problems.append(f"tune.{name}={OmegaConf.select(settings, name)}: {what}")
    problems += [
        f"tune.presets: entry {i} is empty; give its overrides" for i, p in enumerate(settings.presets) if not p
    ]
    return problems


def sweep_problems(arguments: list[str]) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(arguments)
    return [
        f"{o.input_line}: a tune starts from one configuration; give one value "
        f"(to compare several: python -m segperf.train -m {o.input_line})"
        for o in parsed
        if o.is_sweep_override()
    ]
