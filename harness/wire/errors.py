"""Errors both sides of the harness raise and recognise.

``NotAvailable``: an implementation cannot run here (a module that does not
import, no GPU, no architecture facts). A case that raises it is reported
not-available with the message as its reason, never as a failure.
"""


class NotAvailable(RuntimeError):
    """The implementation cannot run here (module missing, no GPU, ...); the message says why."""
