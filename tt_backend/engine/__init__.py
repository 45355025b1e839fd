"""The engine: request intake, the step loop on its own thread, the async decode pipeline, output
processing (stop and length checks, text, final outputs), stats, and the builder that assembles it."""
