"""`python -m segperf.tune`: the fastest training configuration for this machine, found by short
measured runs and kept only where the gain is beyond run-to-run noise (docs/tuning.md)."""
