"""`python -m segperf.data.digits DIR [--train N ...]`, the built-in digits' command under its first
name, kept for the scripts that call it: it runs `python -m segperf.data.mnist.digits`, where the
generator lives now. Nothing is imported from here."""

import runpy

if __name__ == "__main__":
    runpy.run_module("segperf.data.mnist.digits", run_name="__main__", alter_sys=True)
