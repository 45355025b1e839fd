"""Stop strings on the output text, as vLLM matches them."""

from tt_backend.engine.stop_strings import OutputText


def feed(text: OutputText, deltas: list[str]) -> tuple[list[str], str | None]:
    """Stream the deltas; return what was handed out after each, and the stop string hit."""
    out = []
    for delta in deltas:
        hit = text.append(delta)
        out.append(text.take(finished=hit is not None))
        if hit is not None:
            return out, hit
    out.append(text.take(finished=True))
    return out, None


def test_a_stop_string_split_over_deltas_cuts_the_text_and_is_never_streamed() -> None:
    sent, hit = feed(OutputText(("STOP",)), ["Hello ", "wor", "ld S", "TO", "P and more"])
    assert hit == "STOP" and "".join(sent) == "Hello world "
    # three characters (len("STOP") - 1) stay held back while streaming
    assert sent == ["Hel", "lo ", "worl", "d ", ""]


def test_include_stop_str_in_output_keeps_it_and_holds_nothing_back() -> None:
    sent, hit = feed(OutputText(("STOP",), include_stop_str_in_output=True), ["ab", "cSTOPde"])
    assert hit == "STOP" and sent == ["ab", "cSTOP"]


def test_the_first_listed_stop_string_found_wins() -> None:
    # vLLM checks the stop strings in order, not by position in the text
    sent, hit = feed(OutputText(("xy", "b")), ["abcxyz"])
    assert hit == "xy" and "".join(sent) == "abc"


def test_text_without_a_stop_string_is_all_handed_out_at_the_end() -> None:
    sent, hit = feed(OutputText(("never",)), ["one ", "two ", "thre", "e"])
    assert hit is None and "".join(sent) == "one two three" and sent[-1] == "hree"
