"""A user's own model, written apart from segperf: a small CNN that tells circles, squares and
triangles apart, and a data module that draws them itself (no download). segperf trains it with
`python -m segperf.train --config-dir conf model=shapes_cnn data=shapes ...` (see ../README.md)."""
