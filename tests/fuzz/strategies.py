"""The fuzz mix: 40% of requests to `tt_llm`, 20% each to `ensemble`, the front's chat and its
completions; about 40% of each valid (tests/fuzz/triton_strategies.py VALID_PERCENT)."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.fuzz.front_strategies import front_request
from tests.fuzz.request import FuzzRequest
from tests.fuzz.triton_strategies import ensemble_request, tt_llm_request


@st.composite
def fuzz_request(draw: st.DrawFn, served_model: str) -> FuzzRequest:
    """`served_model`: the name the front serves (its valid `model`)."""
    slot = draw(st.integers(0, 9))
    if slot < 4:
        return draw(tt_llm_request())
    if slot < 6:
        return draw(ensemble_request())
    return draw(front_request(chat=slot < 8, model=served_model))
