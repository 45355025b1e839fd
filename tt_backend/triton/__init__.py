"""The only code that touches `triton_python_backend_utils`: the `tt_llm`, `preprocessing` and
`postprocessing` models, request parsing, response building, cancellation and metrics export."""
