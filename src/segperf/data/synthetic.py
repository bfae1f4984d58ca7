"""`python -m segperf.data.synthetic DIR [--cars N ...]`, the built-in Carvana generator's command
under its first name, kept for the scripts that call it: it runs `python -m
segperf.data.carvana.synthetic`, where the generator lives now. Nothing is imported from here."""

import runpy

if __name__ == "__main__":
    runpy.run_module("segperf.data.carvana.synthetic", run_name="__main__", alter_sys=True)
