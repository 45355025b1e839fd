"""`python -m tt_backend.tt_doctor`: what a machine has, and lacks, for device=tt, in plain words.

One line per check, `ok`, `missing` or `warn`, with what to do; exit 0 when nothing is missing.
Independent of the engine: it imports only the mesh options, the model registry and the ttnn import
(`devices/tt/mesh.py`), none of which loads torch. The checks are pure functions over what they are
given (`checks.py`: Python, ttnn, chips, mesh, fabric, HF_MODEL, a checkpoint; `generators.py`:
tt-metal's `models` package and the TT generator classes); `__main__.py` gathers the machine's
facts and prints them.
"""
