"""Text ↔ token helpers: loading the tokenizer, chat encoding, EOS ids, incremental detokenization.

No torch here: the Triton `preprocessing`/`postprocessing` models import only this package and
the model-directory resolution, not the engine.
"""
