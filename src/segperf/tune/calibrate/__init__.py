"""`python -m segperf.tune calibrate TUNE_DIR`: how far a tuner's probe can be trusted, and this
machine's later-run noise (segperf.tune.later_noise) for the tunes after it.

    python -m segperf.tune calibrate multirun/<date>/tune-<time> --rounds 2 --long-steps 64 \\
        --out outputs/probe-calibration

For each configuration a finished tune measured (the start, each preset, every candidate and best
of its steps, the tuned one; its tune.json), each round runs one probe exactly as the tuner runs
it (segperf.tune.runner.LaunchMeasure's job: SteadyProbe, the same size and settings, no time
limit, no screening) and one long run of `--long-steps` (64) steps after the warm-up
(`train.images_per_s`, PerfMonitor's rate), one configuration after another, A-probe A-long
B-probe B-long ..., so that both see the machine in the same minutes. It writes, as Markdown
(printed and `calibration.md`) and JSON (`calibration.json`):

- per configuration: the probes' and the long runs' images/s (geometric means), their ratio, and
  whether that is within ±15% (the bar: for at least 80% of the configurations);
- per decision of the tune with an interval: the ratio the long runs give for its two sides and
  whether the tune's printed interval contains it (the coverage; the bar: at least 90%);
- the tune's claims (each final configuration against the start, the tuned one against the fastest
  other) against their long runs, with `--claim-rounds` (3) long runs of each final configuration
  (the study's own rounds count; the missing ones are run after them, interleaved), and whether the
  tuned configuration reaches 0.90x of the fastest other (geometric means).

It also records this machine's later-run noise (segperf.tune.later_noise): how much one run's
images/s scattered between the study's runs of a configuration, the larger of its probes' and its
long runs' pooled noise. The next tune on this machine counts it in the intervals it prints.

The long runs are ordinary training runs (`python -m segperf.train`), run one at a time in this
process's folder `--out`; nothing of the tune is changed. A study of a 10-minute tune's ~20
configurations at 2 rounds takes about an hour on 2 cores: run it on a quiet machine.

`study` reads the tune's record and the study's rates (no run), `runs` runs the study's jobs,
`tables` writes calibration.md and calibration.json, `cli` is the command line.
"""
