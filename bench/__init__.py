"""ReviewHub's benchmark harness: `make bench` (or `python -m bench [name ...]`).

Every target is a ratio against a baseline measured in the same run, or a count noise cannot fake, because a
2-core machine shared with other work gives noisy absolute figures. See BENCHMARKS.md for the latest table.
"""
