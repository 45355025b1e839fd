"""The engine's refusals by kind (defined with the error kinds in tt_backend.contract.errors)."""

from tt_backend.contract.errors import CapacityError, RequestError, UnavailableError

__all__ = ["CapacityError", "RequestError", "UnavailableError"]
